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

// sum[k] = the sum over c in [0, C) of terms(c)[k], in one order whatever the row's alignment:
// element c into lane c % 16, then the lanes added in order. (An `omp simd` reduction lets the
// vectoriser peel a few elements off to align a load, which moves where its lanes start: the
// same row at two addresses summed two ways.)
template <int K, typename Terms>
inline void LaneSums(int C, Terms terms, float (&sum)[K]) {
  constexpr int kLanes = 16;
  float acc[K][kLanes] = {};
  float t[K];
  int c = 0;
  for (; c + kLanes <= C; c += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      terms(c + l, t);
      for (int k = 0; k < K; ++k) acc[k][l] += t[k];
    }
  }
  for (int l = 0; c + l < C; ++l) {
    terms(c + l, t);
    for (int k = 0; k < K; ++k) acc[k][l] += t[k];
  }
  for (int k = 0; k < K; ++k) {
    float s = 0.f;
    for (int l = 0; l < kLanes; ++l) s += acc[k][l];
    sum[k] = s;
  }
}

// Row n of dout (N,C): in place where it is fp32, else its exact values widened into *wide.
inline const float* NormRowOf(CPtr dout, int n, int C, std::vector<float>* wide) {
  const int64_t at = static_cast<int64_t>(n) * C;
  if (dout.f32()) return dout.as_f32() + at;
  wide->resize(static_cast<size_t>(C));
  elem::With(dout.type, [&](auto e) {
    using E = decltype(e);
    const typename E::T* d = elem::Of<E>(dout) + at;
    for (int c = 0; c < C; ++c) (*wide)[static_cast<size_t>(c)] = E::Ld(d[c]);
  });
  return wide->data();
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
