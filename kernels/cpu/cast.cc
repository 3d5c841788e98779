#include "kernels/cast.h"

namespace gantry::kernels {

void cast_to_bf16(uint16_t* out, const float* in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16Of(in[i]);
}

void cast_from_bf16(float* out, const uint16_t* in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = FloatOfBf16(in[i]);
}

}  // namespace gantry::kernels
