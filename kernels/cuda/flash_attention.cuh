// The fused attention's device code (kernels/cuda/flash_attention.cu launches it). A header
// so that tests/kernels/flash_attention_emulated_test.cc can run the same kernels on the CPU
// under an emulation of CUDA's threads, barriers and warp shuffles, in CI, which has no GPU.
//
// Fused causal self-attention (flash-attention style, fp32 inside): the (T, T) scores are never
// written to memory. Forward keeps each query row's log-sum-exp of its scaled scores; the
// backward recomputes the probabilities from it. The CPU twin is kernels/cpu/attention.cc
// (the same math with the probabilities kept): tests/gpu compares them.
//
// Layout of the work: a block holds 8 warps; in forward and for dQ a warp owns one query
// row, for dK and dV one key row. Keys (or queries) are streamed through shared memory in
// tiles of 32, one per lane, so that a lane computes a whole dot product and the warp's 32
// scores come out at once; the weighted sums over the tile then go dimension-wise (lane d
// owns dimensions d, d + 32, ...) with each lane's weight broadcast by a shuffle. The
// online softmax (running max m, running sum l) rescales the accumulator when m grows.
// Deterministic: every sum has a fixed order, and nothing is accumulated atomically (dK and
// dV have their own pass over the queries rather than atomics from the dQ pass).
//
// Element types (elem.cuh): qkv, out, dout and dqkv are of one type E, fp32 or 16-bit. Values
// are widened as they are loaded (into shared memory and registers, all fp32), the outputs
// rounded once as they are stored; lse, D and every sum stay fp32. So a 16-bit call gives the
// fp32 kernels' bits on the widened inputs, rounded.
#pragma once

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/round.cuh"
#include "kernels/cuda/ns.h"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/reduce.cuh"

// Loops to unroll (nvcc; the CPU emulation compiles them as they are).
#ifdef __CUDACC__
#define GANTRY_UNROLL _Pragma("unroll")
#else
#define GANTRY_UNROLL
#endif

// The block's dynamic shared memory, as floats.
#ifndef GANTRY_DYNAMIC_SHARED
#define GANTRY_DYNAMIC_SHARED(name) extern __shared__ float name[]
#endif

namespace gantry::GANTRY_CUDA_NS::flash {
namespace {  // one translation unit each: the launcher's, or the emulated test's


constexpr int kWarps = 8;      // rows per block
constexpr int kTile = 32;      // keys (queries) per shared-memory tile: one per lane
constexpr int kMaxHead = 128;  // head size limit: 4 dimensions per lane
constexpr int kPerLane = kMaxHead / 32;

// Row t of head h of part (0 q, 1 k, 2 v) of sequence b in qkv (B, T, 3C).
template <typename S>
__device__ inline const S* QkvRow(const S* qkv, int b, int t, int T, int part, int h, int C, int hs) {
  return qkv + (static_cast<int64_t>(b) * T + t) * 3 * C + static_cast<int64_t>(part) * C + static_cast<int64_t>(h) * hs;
}

// Loads rows [r0, r0 + 32) of a (T, ·) matrix of E's type (row pointer `row(r)`), widened,
// into a (32, stride) fp32 shared tile; rows past T are zero.
template <typename E, typename RowFn>
__device__ inline void LoadTile(float* tile, int stride, int r0, int T, int hs, RowFn row) {
  for (int idx = threadIdx.x; idx < kTile * hs; idx += blockDim.x) {
    const int r = idx / hs, d = idx % hs;
    tile[r * stride + d] = r0 + r < T ? E::Ld(row(r0 + r)[d]) : 0.f;
  }
}

__device__ inline float Dot(const float* a, const float* b, int hs) {
  float s = 0.f;
  for (int d = 0; d < hs; ++d) s += a[d] * b[d];
  return s;
}

// acc[e] (dimension lane + 32e) += sum over the tile's lanes jj < n of w_jj * tile[jj][d].
__device__ inline void AccumulateTile(float (&acc)[kPerLane], float w, const float* tile, int stride, int n, int hs) {
  const int lane = threadIdx.x % 32;
  for (int jj = 0; jj < n; ++jj) {
    const float wj = __shfl_sync(0xffffffffu, w, jj);
GANTRY_UNROLL
    for (int e = 0; e < kPerLane; ++e) {
      const int d = lane + 32 * e;
      if (d < hs) acc[e] += wj * tile[jj * stride + d];
    }
  }
}

// Where a warp is: sequence b, head h (block row bh of B·NH), and its row (a query in
// forward and dQ, a key in dK/dV) among the block's kWarps; pad: shared rows read lane-strided
// are hs + 1 wide, so that the lanes hit distinct banks.
struct WarpRow {
  int C, bh, b, h, warp, lane, row, pad;
  __device__ WarpRow(int NH, int hs)
      : C(NH * hs), bh(blockIdx.y), b(bh / NH), h(bh % NH), warp(threadIdx.x / 32), lane(threadIdx.x % 32),
        row(blockIdx.x * kWarps + warp), pad(hs + 1) {}
};

// grid (ceil(T / kWarps), B * NH). qkv (B, T, 3C) → out (B, T, C), lse (B, NH, T).
// round_bits (kernels/cuda/round.cuh): the weights exp(s - m) rounded to that type before they
// weigh V, their sum kept unrounded, as 16-bit flash attention computes (mixed precision).
template <typename E>
__global__ void FlashForwardKernel(typename E::T* out, float* lse, const typename E::T* qkv, int B, int T, int NH,
                                   int hs, float scale, int round_bits) {
  GANTRY_DYNAMIC_SHARED(sm);
  const WarpRow w(NH, hs);
  const int C = w.C, bh = w.bh, b = w.b, h = w.h, warp = w.warp, lane = w.lane, i = w.row, pad = w.pad;
  float* Ks = sm;
  float* Vs = Ks + kTile * pad;
  float* q = Vs + kTile * hs + warp * hs;
  if (i < T) {
    const typename E::T* src = QkvRow(qkv, b, i, T, 0, h, C, hs);
    for (int d = lane; d < hs; d += 32) q[d] = E::Ld(src[d]);
  }
  __syncwarp();
  float acc[kPerLane] = {};
  float m = -INFINITY, l = 0.f;
  const int last = min(T - 1, static_cast<int>(blockIdx.x) * kWarps + kWarps - 1);  // the block's last query
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed
    LoadTile<E>(Ks, pad, j0, T, hs, [&](int j) { return QkvRow(qkv, b, j, T, 1, h, C, hs); });
    LoadTile<E>(Vs, hs, j0, T, hs, [&](int j) { return QkvRow(qkv, b, j, T, 2, h, C, hs); });
    __syncthreads();
    if (i >= T || j0 > i) continue;  // warp-uniform
    const int j = j0 + lane;
    const float s = j <= i ? Dot(q, Ks + lane * pad, hs) * scale : -INFINITY;
    const float m_new = fmaxf(m, WarpMax(s));  // finite: key j0 <= i is in the tile
    const float p = j <= i ? expf(s - m_new) : 0.f;
    const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l = l * corr + WarpSum(p);
GANTRY_UNROLL
    for (int e = 0; e < kPerLane; ++e) acc[e] *= corr;
    AccumulateTile(acc, RoundBits(p, round_bits), Vs, hs, min(kTile, i - j0 + 1), hs);
    m = m_new;
  }
  if (i >= T) return;
  typename E::T* dst = out + (static_cast<int64_t>(b) * T + i) * C + static_cast<int64_t>(h) * hs;
GANTRY_UNROLL
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < hs) dst[d] = E::St(acc[e] / l);
  }
  if (lane == 0) lse[static_cast<int64_t>(bh) * T + i] = m + logf(l);
}

// One warp per row: D[bh, i] = dout_i · out_i (the softmax backward's row term), in fp32.
template <typename E>
__global__ void FlashRowDotKernel(float* D, const typename E::T* dout, const typename E::T* out, int B, int T, int NH,
                                  int hs) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;  // (b, h, i)
  const int lane = threadIdx.x % 32;
  if (row >= static_cast<int64_t>(B) * NH * T) return;
  const int i = static_cast<int>(row % T), h = static_cast<int>(row / T % NH), b = static_cast<int>(row / T / NH);
  const int64_t at = (static_cast<int64_t>(b) * T + i) * NH * hs + static_cast<int64_t>(h) * hs;
  float s = 0.f;
  for (int d = lane; d < hs; d += 32) s += E::Ld(dout[at + d]) * E::Ld(out[at + d]);
  s = WarpSum(s);
  if (lane == 0) D[row] = s;
}

// dQ: a warp per query row i, keys j <= i streamed. ds_ij = p_ij (dout_i · v_j - D_i),
// dq_i = scale * sum_j ds_ij k_j. Writes dqkv's q part.
template <typename E>
__global__ void FlashBackwardQKernel(typename E::T* dqkv, const typename E::T* dout, const typename E::T* qkv,
                                     const float* lse, const float* D, int B, int T, int NH, int hs, float scale) {
  GANTRY_DYNAMIC_SHARED(sm);
  const WarpRow w(NH, hs);
  const int C = w.C, bh = w.bh, b = w.b, h = w.h, warp = w.warp, lane = w.lane, i = w.row, pad = w.pad;
  float* Ks = sm;
  float* Vs = Ks + kTile * pad;
  float* q = Vs + kTile * pad + warp * 2 * hs;
  float* g = q + hs;  // dout_i
  if (i < T) {
    const typename E::T* src = QkvRow(qkv, b, i, T, 0, h, C, hs);
    const typename E::T* gs = dout + (static_cast<int64_t>(b) * T + i) * C + static_cast<int64_t>(h) * hs;
    for (int d = lane; d < hs; d += 32) q[d] = E::Ld(src[d]), g[d] = E::Ld(gs[d]);
  }
  __syncwarp();
  const float lse_i = i < T ? lse[static_cast<int64_t>(bh) * T + i] : 0.f;
  const float D_i = i < T ? D[static_cast<int64_t>(bh) * T + i] : 0.f;
  float acc[kPerLane] = {};
  const int last = min(T - 1, static_cast<int>(blockIdx.x) * kWarps + kWarps - 1);
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();
    LoadTile<E>(Ks, pad, j0, T, hs, [&](int j) { return QkvRow(qkv, b, j, T, 1, h, C, hs); });
    LoadTile<E>(Vs, pad, j0, T, hs, [&](int j) { return QkvRow(qkv, b, j, T, 2, h, C, hs); });
    __syncthreads();
    if (i >= T || j0 > i) continue;
    const int j = j0 + lane;
    float ds = 0.f;
    if (j <= i) {
      const float p = expf(Dot(q, Ks + lane * pad, hs) * scale - lse_i);
      ds = p * (Dot(g, Vs + lane * pad, hs) - D_i);
    }
    AccumulateTile(acc, ds, Ks, pad, min(kTile, i - j0 + 1), hs);
  }
  if (i >= T) return;
  typename E::T* dst = dqkv + (static_cast<int64_t>(b) * T + i) * 3 * C + static_cast<int64_t>(h) * hs;
GANTRY_UNROLL
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < hs) dst[d] = E::St(acc[e] * scale);
  }
}

// dK, dV: a warp per key row j, queries i >= j streamed. dv_j = sum_i p_ij dout_i,
// dk_j = scale * sum_i ds_ij q_i. Writes dqkv's k and v parts.
template <typename E>
__global__ void FlashBackwardKVKernel(typename E::T* dqkv, const typename E::T* dout, const typename E::T* qkv,
                                      const float* lse, const float* D, int B, int T, int NH, int hs, float scale) {
  GANTRY_DYNAMIC_SHARED(sm);
  const WarpRow w(NH, hs);
  const int C = w.C, bh = w.bh, b = w.b, h = w.h, warp = w.warp, lane = w.lane, j = w.row, pad = w.pad;
  float* Qs = sm;
  float* Gs = Qs + kTile * pad;  // dout rows
  float* Ls = Gs + kTile * pad;  // lse of the tile's queries
  float* Ds = Ls + kTile;        // D of the tile's queries
  float* k = Ds + kTile + warp * 2 * hs;
  float* v = k + hs;
  if (j < T) {
    const typename E::T* ks = QkvRow(qkv, b, j, T, 1, h, C, hs);
    const typename E::T* vs = QkvRow(qkv, b, j, T, 2, h, C, hs);
    for (int d = lane; d < hs; d += 32) k[d] = E::Ld(ks[d]), v[d] = E::Ld(vs[d]);
  }
  __syncwarp();
  float dk[kPerLane] = {}, dv[kPerLane] = {};
  const int first = static_cast<int>(blockIdx.x) * kWarps;  // the block's first key: earlier queries see none
  for (int i0 = first - first % kTile; i0 < T; i0 += kTile) {
    __syncthreads();
    LoadTile<E>(Qs, pad, i0, T, hs, [&](int i) { return QkvRow(qkv, b, i, T, 0, h, C, hs); });
    LoadTile<E>(Gs, pad, i0, T, hs,
                [&](int i) { return dout + (static_cast<int64_t>(b) * T + i) * C + static_cast<int64_t>(h) * hs; });
    if (threadIdx.x < kTile) {
      const int i = i0 + threadIdx.x;
      Ls[threadIdx.x] = i < T ? lse[static_cast<int64_t>(bh) * T + i] : 0.f;
      Ds[threadIdx.x] = i < T ? D[static_cast<int64_t>(bh) * T + i] : 0.f;
    }
    __syncthreads();
    if (j >= T || i0 + kTile <= j) continue;  // every query of the tile is before key j
    const int i = i0 + lane;
    float p = 0.f, ds = 0.f;
    if (i >= j && i < T) {
      p = expf(Dot(Qs + lane * pad, k, hs) * scale - Ls[lane]);
      ds = p * (Dot(Gs + lane * pad, v, hs) - Ds[lane]);
    }
    AccumulateTile(dv, p, Gs, pad, min(kTile, T - i0), hs);
    AccumulateTile(dk, ds, Qs, pad, min(kTile, T - i0), hs);
  }
  if (j >= T) return;
  typename E::T* dst = dqkv + (static_cast<int64_t>(b) * T + j) * 3 * C + static_cast<int64_t>(h) * hs;
GANTRY_UNROLL
  for (int e = 0; e < kPerLane; ++e) {
    const int d = lane + 32 * e;
    if (d < hs) dst[C + d] = E::St(dk[e] * scale), dst[2 * C + d] = E::St(dv[e]);
  }
}

// Dynamic shared memory of each kernel for head size hs (at most 41 KB at hs 128: under the
// 48 KB a launch gets without opting in).
inline size_t ForwardSharedBytes(int hs) { return sizeof(float) * (kTile * (hs + 1) + kTile * hs + kWarps * hs); }
inline size_t BackwardQSharedBytes(int hs) { return sizeof(float) * (2 * kTile * (hs + 1) + kWarps * 2 * hs); }
inline size_t BackwardKVSharedBytes(int hs) { return BackwardQSharedBytes(hs) + sizeof(float) * 2 * kTile; }

}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS::flash
