#include "kernels/gelu.h"

#include "kernels/cpu/elem.h"
#include "kernels/cpu/vec_math.h"

namespace gantry::kernels {

void gelu_forward(Ptr out, CPtr inp, int64_t N) {
  // inp (N) → out (N)
  elem::With(out.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* o = elem::Of<E>(out);
    const typename E::T* x = elem::Of<E>(inp);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; ++i) o[i] = E::St(vec::Gelu(E::Ld(x[i])));
  });
}

void gelu_backward(Ptr dinp, CPtr inp, CPtr dout, int64_t N) {
  // inp (N), dout (N) → dinp (N)
  elem::With(dinp.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* dx = elem::Of<E>(dinp);
    const typename E::T* x = elem::Of<E>(inp);
    const typename E::T* dy = elem::Of<E>(dout);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; ++i) dx[i] = E::St(vec::GeluGrad(E::Ld(x[i])) * E::Ld(dy[i]));
  });
}

}  // namespace gantry::kernels
