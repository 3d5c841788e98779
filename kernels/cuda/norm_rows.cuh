// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The row walk of the norms' forward kernels (layernorm.cuh, rmsnorm.cu), device code only: a
// warp per row, lane l taking the 8 columns at 8 (l + 32 i) + k, i = 0, 1, ..., k = 0..7. With
// vec (C a multiple of 8, every row of every tensor 16-byte aligned) those are 16-byte loads and
// stores; otherwise scalar ones of the same columns (those below C). Either way a lane sums the
// same values in the same order, so the two give the same bits.
#pragma once

#include "kernels/cuda/ns.h"

#include <cstdint>

#include "kernels/cuda/elem.cuh"

namespace gantry::GANTRY_CUDA_NS {

constexpr int kRowSpan = 8;  // columns a lane takes at a time

// v[k] = p[c + k] for c + k < C, 0 beyond.
__device__ inline void LoadRow8(const float* p, int c, int C, bool vec, float (&v)[8]) {
  if (vec) {
    float lo[4], hi[4];
    LoadF4(p + c, lo);
    LoadF4(p + c + 4, hi);
    for (int k = 0; k < 4; ++k) v[k] = lo[k], v[4 + k] = hi[k];
    return;
  }
  for (int k = 0; k < kRowSpan; ++k) v[k] = c + k < C ? p[c + k] : 0.f;
}

// p[c + k] = E::St(v[k]) for c + k < C.
template <typename E>
__device__ inline void StoreRow8(typename E::T* p, int c, int C, bool vec, const float (&v)[8]) {
  if (vec) {
    if constexpr (sizeof(typename E::T) == 4) {
      const float lo[4] = {v[0], v[1], v[2], v[3]}, hi[4] = {v[4], v[5], v[6], v[7]};
      StoreF4(p + c, lo);
      StoreF4(p + c + 4, hi);
    } else {
      Store8<E>(p + c, v);
    }
    return;
  }
  for (int k = 0; k < kRowSpan && c + k < C; ++k) p[c + k] = E::St(v[k]);
}

// The first pass of a fused norm: u = the row's columns c.. of x (row offset off); with add,
// x's + add's, also stored to sum's row (the residual), which the later passes then read: a lane
// reads back only the columns it wrote, its own stores in program order.
__device__ inline void LoadRowAdd8(float (&u)[8], const float* x, const float* add, float* sum, int64_t off, int c,
                                   int C, bool vec) {
  LoadRow8(x + off, c, C, vec, u);
  if (add == nullptr) return;
  float v[8];
  LoadRow8(add + off, c, C, vec, v);
  for (int k = 0; k < kRowSpan; ++k) u[k] += v[k];
  StoreRow8<F32>(sum + off, c, C, vec, u);
}

}  // namespace gantry::GANTRY_CUDA_NS
