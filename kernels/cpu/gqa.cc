#include "kernels/gqa.h"

#include <algorithm>

#include "kernels/cpu/elem.h"

namespace gantry::kernels {

void gqa_expand(Ptr out, CPtr qkv, int64_t rows, int NH, int NKV, int hd) {
  const int64_t in_w = static_cast<int64_t>(NH + 2 * NKV) * hd, out_w = static_cast<int64_t>(3) * NH * hd;
  const int group = NH / NKV;
  elem::With(out.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* o = elem::Of<E>(out);
    const typename E::T* in = elem::Of<E>(qkv);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const typename E::T* x = in + r * in_w;
      typename E::T* y = o + r * out_w;
      std::copy(x, x + static_cast<int64_t>(NH) * hd, y);
      for (int part = 1; part <= 2; ++part) {  // keys, then values
        const typename E::T* src = x + static_cast<int64_t>(NH + (part - 1) * NKV) * hd;
        typename E::T* dst = y + static_cast<int64_t>(part) * NH * hd;
        for (int h = 0; h < NH; ++h) std::copy(src + (h / group) * hd, src + (h / group + 1) * hd, dst + h * hd);
      }
    }
  });
}

void gqa_reduce(Ptr dqkv, CPtr dqkv3, int64_t rows, int NH, int NKV, int hd) {
  const int64_t out_w = static_cast<int64_t>(NH + 2 * NKV) * hd, in_w = static_cast<int64_t>(3) * NH * hd;
  const int group = NH / NKV;
  elem::With(dqkv.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* o = elem::Of<E>(dqkv);
    const typename E::T* in = elem::Of<E>(dqkv3);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const typename E::T* x = in + r * in_w;
      typename E::T* y = o + r * out_w;
      std::copy(x, x + static_cast<int64_t>(NH) * hd, y);
      for (int part = 1; part <= 2; ++part) {
        const typename E::T* src = x + static_cast<int64_t>(part) * NH * hd;
        typename E::T* dst = y + static_cast<int64_t>(NH + (part - 1) * NKV) * hd;
        for (int k = 0; k < NKV; ++k) {
          for (int d = 0; d < hd; ++d) {
            float s = 0.f;
            for (int h = k * group; h < (k + 1) * group; ++h) s += E::Ld(src[h * hd + d]);
            dst[k * hd + d] = E::St(s);
          }
        }
      }
    }
  });
}

}  // namespace gantry::kernels
