#include "kernels/cast.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/elem.h"
#include "kernels/types.h"

namespace gantry::kernels {

void cast_to_bf16(uint16_t* out, const float* in, int64_t n) { convert(Ptr(out, Precision::kBf16), in, n); }

void cast_from_bf16(float* out, const uint16_t* in, int64_t n) { convert(out, CPtr(in, Precision::kBf16), n); }

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

void convert(Ptr out, CPtr in, int64_t n) {
  if (out.type == in.type) {
    if (out.data != in.data && n > 0) std::memmove(out.data, in.data, static_cast<size_t>(n) * ElemBytes(in.type));
    return;
  }
  elem::With(out.type, [&](auto eo) {
    elem::With(in.type, [&](auto ei) {
      using EO = decltype(eo);
      using EI = decltype(ei);
      typename EO::T* o = elem::Of<EO>(out);
      const typename EI::T* x = elem::Of<EI>(in);
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
      for (int64_t i = 0; i < n; ++i) o[i] = EO::St(EI::Ld(x[i]));
    });
  });
}

}  // namespace gantry::kernels
