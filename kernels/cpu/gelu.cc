#include "kernels/gelu.h"

#include <cmath>

#include "kernels/cpu/vec_math.h"

namespace gantry::kernels {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t N) {
  // inp (N) → out (N)
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + vec::Tanh(u));
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N) {
  // inp (N), dout (N) → dinp (N)
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float th = vec::Tanh(u);
    const float sech2 = 1.0f - th * th;
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * du;
    dinp[i] = grad * dout[i];
  }
}

}  // namespace gantry::kernels
