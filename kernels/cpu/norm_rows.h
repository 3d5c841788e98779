// The rows the norms' backward reads and writes beside fp32 (kernels/cpu/layernorm.cc,
// rmsnorm.cc): a 16-bit output gradient's row widened, and the input gradient's row stored
// rounded for the GEMMs that read it next.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/column_blocks.h"
#include "kernels/cpu/elem.h"
#include "kernels/types.h"

namespace gantry::kernels {

// Row n of dout (N,C) as fp32 in *room, 64-byte aligned: its values copied, or a 16-bit row's
// widened. Always a copy, so that the backward's row sums see the same address alignment
// whatever dout's type and wherever its rows lie (an `omp simd` reduction's order follows the
// alignment its vectoriser peels to: the same row at two addresses may sum two ways).
inline const float* NormRowOf(CPtr dout, int n, int C, std::vector<float>* room) {
  room->resize(static_cast<size_t>(C) + 16);
  float* row = room->data();
  row += (16 - (reinterpret_cast<uintptr_t>(row) / sizeof(float)) % 16) % 16;  // 64-byte aligned
  const int64_t at = static_cast<int64_t>(n) * C;
  elem::With(dout.type, [&](auto e) {
    using E = decltype(e);
    const typename E::T* d = elem::Of<E>(dout) + at;
    for (int c = 0; c < C; ++c) row[c] = E::Ld(d[c]);
  });
  return row;
}

// Row n of to (N,C) = the row dx rounded to to's type (nothing where to is null).
inline void StoreNormRow(Ptr to, const float* dx, int n, int C) {
  if (!to) return;
  elem::With(to.type, [&](auto e) {
    using E = decltype(e);
    typename E::T* o = elem::Of<E>(to) + static_cast<int64_t>(n) * C;
    for (int c = 0; c < C; ++c) o[c] = E::St(dx[c]);
  });
}

// The norms' parameter gradients: out[k][c] += the sum over rows n, in order, of
// terms(n, c, dy)[k], dy dout's (n, c) read exactly; column blocks in parallel, so the bits do
// not depend on the thread count.
template <int P, typename Terms>
void NormParamSums(CPtr dout, int N, int C, Terms terms, float* const (&out)[P]) {
  constexpr int kCols = 16;
  elem::With(dout.type, [&](auto e) {
    using E = decltype(e);
    const typename E::T* d = elem::Of<E>(dout);
    ParallelColumnBlocks<kCols>(C, [&](int c0, int c1) {
      float acc[P][kCols] = {};
      float t[P];
      for (int n = 0; n < N; ++n) {
        const typename E::T* dy = d + static_cast<int64_t>(n) * C;
        for (int c = c0; c < c1; ++c) {
          terms(n, c, E::Ld(dy[c]), t);
          for (int k = 0; k < P; ++k) acc[k][c - c0] += t[k];
        }
      }
      for (int k = 0; k < P; ++k) {
        for (int c = c0; c < c1; ++c) out[k][c] += acc[k][c - c0];
      }
    });
  });
}

}  // namespace gantry::kernels
