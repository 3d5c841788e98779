#include "kernels/swiglu.h"

#include <cmath>

#include "kernels/cpu/elem.h"

namespace gantry::kernels {
namespace {

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void swiglu_forward(Ptr h, CPtr gu, int N, int F) {
  elem::With(h.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* out = elem::Of<E>(h);
    const typename E::T* in = elem::Of<E>(gu);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const typename E::T* g = in + static_cast<int64_t>(n) * 2 * F;
      typename E::T* o = out + static_cast<int64_t>(n) * F;
      for (int f = 0; f < F; ++f) {
        const float x = E::Ld(g[f]);
        o[f] = E::St(x * Sigmoid(x) * E::Ld(g[F + f]));
      }
    }
  });
}

void swiglu_backward(Ptr dgu, CPtr dh, CPtr gu, int N, int F) {
  elem::With(dgu.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* out = elem::Of<E>(dgu);
    const typename E::T* d = elem::Of<E>(dh);
    const typename E::T* in = elem::Of<E>(gu);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      const typename E::T* g = in + static_cast<int64_t>(n) * 2 * F;
      const typename E::T* dy = d + static_cast<int64_t>(n) * F;
      typename E::T* o = out + static_cast<int64_t>(n) * 2 * F;
      for (int f = 0; f < F; ++f) {
        const float x = E::Ld(g[f]), u = E::Ld(g[F + f]), dyf = E::Ld(dy[f]);
        const float sg = Sigmoid(x);
        o[f] = E::St(dyf * u * sg * (1.0f + x * (1.0f - sg)));
        o[F + f] = E::St(dyf * x * sg);
      }
    }
  });
}

}  // namespace gantry::kernels
