#include "kernels/cast.h"

#include <algorithm>

namespace gantry::kernels {

void cast_to_bf16(uint16_t* out, const float* in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16Of(in[i]);
}

void cast_from_bf16(float* out, const uint16_t* in, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) out[i] = FloatOfBf16(in[i]);
}

void round_to(float* out, const float* in, int64_t n, Precision p) {
  switch (p) {
    case Precision::kFp32:
      if (out != in) std::copy_n(in, n, out);
      return;
    case Precision::kBf16:
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) out[i] = RoundToBf16(in[i]);
      return;
    case Precision::kFp16:
#pragma omp parallel for schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) out[i] = RoundToFp16(in[i]);
      return;
  }
}

}  // namespace gantry::kernels
