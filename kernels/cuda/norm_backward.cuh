// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The norms' backward in one pass (LayerNorm: layernorm.cuh; RMSNorm: rmsnorm.cu), device code
// and its launcher. A warp per row, each lane the 4 consecutive columns at 128 j + 4 lane (one
// 16-byte load or store where vec: C a multiple of 4 and every row 16-byte aligned; otherwise
// scalar ones of the same columns, those below C, so both give the same bits), dinp += the input
// gradient. The rows of block b are [b rows_per_block, ...) and its warps take every kNormBwdWarps-th
// of them, adding their parameter-gradient terms in registers; the warps' sums are then added in
// warp order and written to partial[b], which NormParamsFinishKernel adds up in block order: a
// fixed order, no atomics, so the same bits every run. It replaces two passes (the input
// gradient, then ColumnSums over dout and inp again).
//
// The output gradient dout may be 16-bit (E: its element type, read exactly), and the input
// gradient's new values may be stored again rounded to E (dinp16, null: not), the residual
// gradient's copy for the GEMMs that read it next: the same arithmetic on the same fp32 values
// either way.
//
// Rows is the norm: kParams (its parameter gradients: LayerNorm's dweight and dbias, RMSNorm's
// dweight), Row (a row's statistics and sums), and
//   Row Start(int row): the row's statistics, its sums 0;
//   void Add(Row&, float w, float dy, float x, float (&p)[kParams]): one element's terms, to the
//     row's sums and to the parameters' sums p;
//   void Reduce(Row&, int C): the row's sums over the warp (every lane takes part);
//   float Dx(const Row&, float w, float dy, float x): the element's input gradient.
#pragma once

#include "kernels/cuda/ns.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/reduce.cuh"

namespace gantry::GANTRY_CUDA_NS {
namespace {  // one translation unit each

constexpr int kNormBwdWarps = 8;
constexpr int kNormBwdMaxJ = 8;  // column tiles of 128 a lane holds in registers: C up to 1024

// v[k] = p[c + k] for c + k < C (0 beyond); one 16-byte load where vec.
__device__ inline void LoadCols4(const float* p, int c, int C, bool vec, float (&v)[4]) {
  if (vec) {
    LoadF4(p + c, v);
    return;
  }
  for (int k = 0; k < 4; ++k) v[k] = c + k < C ? p[c + k] : 0.f;
}
// The same four columns of a 16-bit row, widened (one 8-byte load where vec).
template <typename E>
__device__ inline void LoadCols4(const typename E::T* p, int c, int C, bool vec, float (&v)[4]) {
  if constexpr (sizeof(typename E::T) == 4) {
    LoadCols4(reinterpret_cast<const float*>(p), c, C, vec, v);
  } else {
#ifdef __CUDACC__
    if (vec) {
      const uint2 u = *reinterpret_cast<const uint2*>(p + c);
      v[0] = E::Ld(static_cast<uint16_t>(u.x & 0xffffu)), v[1] = E::Ld(static_cast<uint16_t>(u.x >> 16));
      v[2] = E::Ld(static_cast<uint16_t>(u.y & 0xffffu)), v[3] = E::Ld(static_cast<uint16_t>(u.y >> 16));
      return;
    }
#endif
    for (int k = 0; k < 4; ++k) v[k] = c + k < C ? E::Ld(p[c + k]) : 0.f;
  }
}
// p[c + k] = v[k] rounded to E for c + k < C (16-bit E: one 8-byte store where vec).
template <typename E>
__device__ inline void StoreCols4Of(typename E::T* p, int c, int C, bool vec, const float (&v)[4]) {
  static_assert(sizeof(typename E::T) == 2, "a 16-bit copy");
#ifdef __CUDACC__
  if (vec) {
    const uint32_t lo = static_cast<uint32_t>(E::St(v[0])) | (static_cast<uint32_t>(E::St(v[1])) << 16);
    const uint32_t hi = static_cast<uint32_t>(E::St(v[2])) | (static_cast<uint32_t>(E::St(v[3])) << 16);
    *reinterpret_cast<uint2*>(p + c) = make_uint2(lo, hi);
    return;
  }
#endif
  for (int k = 0; k < 4 && c + k < C; ++k) p[c + k] = E::St(v[k]);
}
// p[c + k] = v[k] for c + k < C.
__device__ inline void StoreCols4(float* p, int c, int C, bool vec, const float (&v)[4]) {
  if (vec) {
    StoreF4(p + c, v);
    return;
  }
  for (int k = 0; k < 4 && c + k < C; ++k) p[c + k] = v[k];
}

template <int J, typename Rows, typename E>
__global__ void __launch_bounds__(kNormBwdWarps * 32)
    NormBackwardFusedKernel(float* __restrict__ dinp, float* __restrict__ partial, Rows rows,
                            const typename E::T* __restrict__ dout, const float* __restrict__ inp,
                            const float* __restrict__ w, int N, int C, int rows_per_block, bool vec,
                            typename E::T* __restrict__ dinp16) {
  constexpr int P = Rows::kParams;
  static_assert(P == 1 || P == 2, "the block's 256 threads write 128 columns' P sums; the finish kernel's out0, out1");
  __shared__ float warp_sums[kNormBwdWarps][128 * P];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = blockIdx.x * rows_per_block, r1 = min(N, r0 + rows_per_block);
  float wv[J][4], acc[J][4][P];
  for (int j = 0; j < J; ++j) {
    const int c = 128 * j + 4 * lane;
    for (int k = 0; k < 4; ++k) {
      wv[j][k] = 0.f;
      for (int q = 0; q < P; ++q) acc[j][k][q] = 0.f;
    }
    if (c < C) LoadCols4(w, c, C, vec, wv[j]);
  }
  for (int row = r0 + warp; row < r1; row += kNormBwdWarps) {
    const typename E::T* dy = dout + static_cast<int64_t>(row) * C;
    const float* x = inp + static_cast<int64_t>(row) * C;
    typename Rows::Row s = rows.Start(row);
    for (int j = 0; j < J; ++j) {
      const int c = 128 * j + 4 * lane;
      if (c >= C) continue;
      float yv[4], xv[4];
      LoadCols4<E>(dy, c, C, vec, yv);
      LoadCols4(x, c, C, vec, xv);
      for (int k = 0; k < 4 && c + k < C; ++k) rows.Add(s, wv[j][k], yv[k], xv[k], acc[j][k]);
    }
    rows.Reduce(s, C);
    // The row again (from the cache: the warp read it just now), fewer registers held.
    float* dx = dinp + static_cast<int64_t>(row) * C;
    for (int j = 0; j < J; ++j) {
      const int c = 128 * j + 4 * lane;
      if (c >= C) continue;
      float yv[4], xv[4], g[4];
      LoadCols4<E>(dy, c, C, vec, yv);
      LoadCols4(x, c, C, vec, xv);
      LoadCols4(dx, c, C, vec, g);
      for (int k = 0; k < 4; ++k) g[k] += rows.Dx(s, wv[j][k], yv[k], xv[k]);
      StoreCols4(dx, c, C, vec, g);
      if constexpr (sizeof(typename E::T) == 2) {
        if (dinp16 != nullptr) StoreCols4Of<E>(dinp16 + static_cast<int64_t>(row) * C, c, C, vec, g);
      }
    }
  }
  // partial[b] holds C groups of P floats: column c's parameter gradients, the warps' in order.
  for (int j = 0; j < J; ++j) {
    for (int k = 0; k < 4; ++k) {
      for (int q = 0; q < P; ++q) warp_sums[warp][(4 * lane + k) * P + q] = acc[j][k][q];
    }
    __syncthreads();
    const int i = threadIdx.x;  // column 128 j + i / P, gradient i % P
    if (i < 128 * P && 128 * j + i / P < C) {
      float t = warp_sums[0][i];
      for (int v = 1; v < kNormBwdWarps; ++v) t += warp_sums[v][i];
      partial[(static_cast<int64_t>(blockIdx.x) * C + 128 * j) * P + i] = t;
    }
    __syncthreads();
  }
}

// out[q][c] += sum over blocks of partial[b][c][q], in a fixed order: a block of (32, 8) threads
// per 32 columns, thread (x, y) adding blocks y, y + 8, ... in turn, then the 8 sums in y order.
template <int P>
__global__ void NormParamsFinishKernel(float* out0, float* out1, const float* partial, int blocks, int C) {
  __shared__ float sums[P][8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float t[P];
  for (int q = 0; q < P; ++q) t[q] = 0.f;
  if (c < C) {
    for (int b = threadIdx.y; b < blocks; b += 8) {
      for (int q = 0; q < P; ++q) t[q] += partial[(static_cast<int64_t>(b) * C + c) * P + q];
    }
  }
  for (int q = 0; q < P; ++q) sums[q][threadIdx.y][threadIdx.x] = t[q];
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < 8; ++y) {
      for (int q = 0; q < P; ++q) t[q] += sums[q][y][threadIdx.x];
    }
    out0[c] += t[0];
    if constexpr (P > 1) out1[c] += t[1];
  }
}

// Host: the blocks of rows the one-pass backward uses for N rows of C (at most 1024, 8 an SM of
// an H100, as many as the context's scratch has room for), or 0 where it does not take C (over
// 128 kNormBwdMaxJ columns, or not one block's partials in the scratch).
template <typename Rows>
int NormBackwardFusedBlocks(int N, int C) {
  if (C > 128 * kNormBwdMaxJ) return 0;
  return static_cast<int>(std::min<int64_t>(
      {1024, CeilDiv(N, kNormBwdWarps), static_cast<int64_t>(Context::kScratchFloats) / Rows::kParams / C}));
}

// Host: the types a norm's backward takes: dout fp32 without dinp16, or 16-bit with or without a
// dinp16 of its own type (the model's two ways; the cpu takes any).
inline absl::Status CheckNormBackwardTypes(const char* op, kernels::CPtr dout, kernels::Ptr dinp16) {
  if (!dinp16 || (!dinp16.f32() && dinp16.type == dout.type)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": dinp16 is ", kernels::PrecisionName(dinp16.type),
                                                 " where dout is ", kernels::PrecisionName(dout.type),
                                                 " (a 16-bit copy of dout's own type is taken)"));
}

// Host: the one-pass backward over N rows in `blocks` (NormBackwardFusedBlocks, not 0), the
// partial sums in the context's scratch: dinp += the input gradient, dweight (and, where the
// norm has it, dbias) += the parameter gradients, dinp16 (null: none) its new values rounded.
template <typename Rows, typename E>
absl::Status LaunchNormBackwardFused(Context& ctx, int blocks, float* dinp, float* dweight, float* dbias, Rows rows,
                                     const typename E::T* dout, const float* inp, const float* weight, int N, int C,
                                     typename E::T* dinp16) {
  constexpr int P = Rows::kParams;
  const bool vec = C % 4 == 0 && Aligned16({dinp, dout, inp, weight, dinp16});
  const int rows_per_block = CeilDiv(N, blocks), used = CeilDiv(N, rows_per_block);
  float* partial = ctx.scratch();
  auto launch = [&](auto j) -> absl::Status {
    auto* kernel = &NormBackwardFusedKernel<decltype(j)::value, Rows, E>;  // (a comma cannot go in the macro)
    GANTRY_LAUNCH(kernel, used, kNormBwdWarps * 32, 0, ctx.stream())(
        dinp, partial, rows, dout, inp, weight, N, C, rows_per_block, vec, dinp16);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    GANTRY_LAUNCH(NormParamsFinishKernel<P>, CeilDiv(C, 32), dim3(32, 8), 0, ctx.stream())(dweight, dbias, partial,
                                                                                           used, C);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  };
  static_assert(kNormBwdMaxJ == 8, "one case a J");
  switch (CeilDiv(C, 128)) {
    case 1: return launch(std::integral_constant<int, 1>{});
    case 2: return launch(std::integral_constant<int, 2>{});
    case 3: return launch(std::integral_constant<int, 3>{});
    case 4: return launch(std::integral_constant<int, 4>{});
    case 5: return launch(std::integral_constant<int, 5>{});
    case 6: return launch(std::integral_constant<int, 6>{});
    case 7: return launch(std::integral_constant<int, 7>{});
    default: return launch(std::integral_constant<int, 8>{});
  }
}

}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS
