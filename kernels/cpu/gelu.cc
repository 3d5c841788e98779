#include "kernels/gelu.h"

#include "kernels/cpu/vec_math.h"

namespace gantry::kernels {

void gelu_forward(float* out, const float* inp, int64_t N) {
  // inp (N) → out (N)
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) out[i] = vec::Gelu(inp[i]);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N) {
  // inp (N), dout (N) → dinp (N)
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; ++i) dinp[i] = vec::GeluGrad(inp[i]) * dout[i];
}

}  // namespace gantry::kernels
