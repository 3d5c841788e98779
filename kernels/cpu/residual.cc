#include "kernels/residual.h"

namespace gantry::kernels {

void residual_forward(float* out, const float* a, const float* b, int64_t N) {
  // a (N), b (N) → out (N)
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* da, float* db, const float* dout, int64_t N) {
  // dout (N) → da (N) +=, db (N) +=
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

}  // namespace gantry::kernels
