#include "kernels/adamw.h"

#include <cmath>

namespace gantry::kernels {

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t N,
                  const AdamWParams& hp) {
  // params, grads, m, v (N) → params, m, v (N)
  const float bc1 = 1.0f - std::pow(hp.beta1, static_cast<float>(hp.step));
  const float bc2 = 1.0f - std::pow(hp.beta2, static_cast<float>(hp.step));
  const float step_size = hp.lr / bc1;
  const float bc2_sqrt = std::sqrt(bc2);
  const float decay = 1.0f - hp.lr * hp.weight_decay;
  const float* scale = hp.grad_scale;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float g = scale != nullptr ? grads[i] * *scale : grads[i];
    const float mi = hp.beta1 * m[i] + (1.0f - hp.beta1) * g;
    const float vi = hp.beta2 * v[i] + (1.0f - hp.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / bc2_sqrt + hp.eps;
    params[i] = params[i] * decay - step_size * mi / denom;
  }
}

}  // namespace gantry::kernels
