// namespace gantry::cuda::flash (gantry::cuda_emulated::flash in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The fused attention's device code (kernels/cuda/flash_attention.cu launches it). A header
// so that tests/kernels/flash_attention_emulated_test.cc can run the same kernels on the CPU
// under an emulation of CUDA's threads, barriers and warp shuffles, in CI, which has no GPU.
//
// Fused causal self-attention (flash-attention style, fp32 inside): the (T, T) scores are never
// written to memory. Forward keeps each query row's log-sum-exp of its scaled scores; the
// backward recomputes the probabilities from it. The CPU twin is kernels/cpu/attention.cc
// (the same math with the probabilities kept): tests/gpu compares them.
//
// Layout of the work: a block of 256 threads owns 64 rows (queries in forward and for dQ,
// keys for dK and dV) of one (sequence, head), and streams the other side through shared
// memory in tiles of 64 rows. The threads form a 16 x 16 grid: thread (ty, tx) computes the
// 4 x 4 scores of its block rows 4ty..4ty+3 against the tile's rows 4tx..4tx+3, from tiles
// held transposed ([dimension][row], rows of 68 floats: float4 reads, banks spread), so that
// each dimension is two 16-byte loads and 16 multiply-adds. A row's 64 scores lie on the 16
// threads of one half-warp: its maximum is four xor shuffles. The weights then go through
// shared memory (transposed again) so that each thread accumulates its 4 rows of the output
// over HSP / 16 columns (4tx..4tx+3 in each 64-wide group) from a row-major tile: again one
// 16-byte load of weights and HSP / 64 of values per row of the tile. The online softmax
// (running max m, running sum l) rescales the accumulator when m grows; each thread keeps its
// share of l, summed over the half-warp once at the end.
// The head size is padded to HSP (16, 32, 64 or 128, an instantiation each) with zeros.
// Deterministic: every sum has a fixed order, and nothing is accumulated atomically (dK and
// dV have their own pass over the queries rather than atomics from the dQ pass). Every
// product that feeds a sum is an explicit fmaf, so that no compiler's contraction choice (the
// emulated build's differs between instantiations) changes a bit: a 16-bit call and the fp32
// call on the widened values compute alike.
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
#include <type_traits>
#include <utility>

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


constexpr int kWarps = 8;        // FlashRowDotKernel: a warp per row, 8 a block
constexpr int kBlock = 64;       // rows a block owns, and rows a tile streams
constexpr int kThreads = 256;    // a 16 x 16 grid
constexpr int kMaxHead = 128;    // head size limit
constexpr int kTStride = kBlock + 4;  // a transposed tile's rows: 16-byte aligned, banks spread

// The instantiation for head size hs: hs padded to 16, 32, 64 or 128.
inline int PaddedHead(int hs) { return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128; }

template <int HSP>
struct Geometry {
  static constexpr int kCols = HSP / 16;  // output columns a thread accumulates
  // Thread tx's column c: 4tx..4tx+3 in each 64-wide group, or (HSP < 64) kCols in a row.
  __device__ static int Col(int tx, int c) { return kCols >= 4 ? (c / 4) * 64 + tx * 4 + c % 4 : tx * kCols + c; }
  // Floats of a transposed tile ([HSP][kTStride]), which also holds a 64 x 64 one of weights.
  static constexpr int kTransposed = (HSP > kBlock ? HSP : kBlock) * kTStride;
  static constexpr int kRows = kBlock * HSP;  // a row-major tile
};

// Row t of head h of part (0 q, 1 k, 2 v) of sequence b in qkv (B, T, 3C).
template <typename S>
__device__ inline const S* QkvRow(const S* qkv, int b, int t, int T, int part, int h, int C, int hs) {
  return qkv + (static_cast<int64_t>(b) * T + t) * 3 * C + static_cast<int64_t>(part) * C + static_cast<int64_t>(h) * hs;
}

// Rows [r0, r0 + 64) of a (T, ·) matrix of E's type (row pointer `row(r)`), widened into
// shared memory: transposed (tile[d * kTStride + r]) or row-major (tile[r * HSP + d]). Rows
// past T and dimensions past hs are zero.
template <typename E, int HSP, bool kTransposed, typename RowFn>
__device__ inline void LoadTile(float* tile, int r0, int T, int hs, RowFn row) {
  for (int idx = threadIdx.x; idx < kBlock * HSP; idx += kThreads) {
    const int r = idx / HSP, d = idx % HSP;
    const float x = r0 + r < T && d < hs ? E::Ld(row(r0 + r)[d]) : 0.f;
    if (kTransposed) {
      tile[d * kTStride + r] = x;
    } else {
      tile[r * HSP + d] = x;
    }
  }
}

// acc[a][b] += sum over d of A[d][4ty + a] * B[d][4tx + b]: two transposed tiles, d in order.
template <int HSP>
__device__ inline void TileProduct(float (&acc)[4][4], const float* A, const float* B, int ty, int tx) {
GANTRY_UNROLL
  for (int d = 0; d < HSP; ++d) {
    float x[4], y[4];
    LoadF4(A + d * kTStride + 4 * ty, x);
    LoadF4(B + d * kTStride + 4 * tx, y);
GANTRY_UNROLL
    for (int a = 0; a < 4; ++a) {
GANTRY_UNROLL
      for (int b = 0; b < 4; ++b) acc[a][b] = fmaf(x[a], y[b], acc[a][b]);
    }
  }
}

// o[a][c] += sum over j < n, in order, of W[j][4ty + a] * X[j][Col(tx, c)]: weights W
// transposed ([j][row], kTStride), values X a row-major tile.
template <int HSP>
__device__ inline void AccumulateRows(float (&o)[4][HSP / 16], const float* W, const float* X, int ty, int tx, int n) {
  constexpr int kCols = Geometry<HSP>::kCols;
  for (int j = 0; j < n; ++j) {
    float w[4], x[kCols];
    LoadF4(W + j * kTStride + 4 * ty, w);
    if constexpr (kCols >= 4) {
GANTRY_UNROLL
      for (int g = 0; g < kCols / 4; ++g) {
        float v[4];
        LoadF4(X + j * HSP + g * 64 + 4 * tx, v);
        for (int k = 0; k < 4; ++k) x[4 * g + k] = v[k];
      }
    } else {
GANTRY_UNROLL
      for (int c = 0; c < kCols; ++c) x[c] = X[j * HSP + tx * kCols + c];
    }
GANTRY_UNROLL
    for (int a = 0; a < 4; ++a) {
GANTRY_UNROLL
      for (int c = 0; c < kCols; ++c) o[a][c] = fmaf(w[a], x[c], o[a][c]);
    }
  }
}

// Writes a thread's 4 x 4 values, rows 4ty + a by columns 4tx + b, transposed into a
// [column][row] tile of kTStride.
__device__ inline void StoreTransposed(float* tile, const float (&v)[4][4], int ty, int tx) {
GANTRY_UNROLL
  for (int a = 0; a < 4; ++a) {
GANTRY_UNROLL
    for (int b = 0; b < 4; ++b) tile[(4 * tx + b) * kTStride + 4 * ty + a] = v[a][b];
  }
}

// Over the 16 threads of a half-warp (one row's): the maximum, the sum (a fixed tree).
__device__ inline float RowMax(float v) { return XorTree(v, 8, MaxOp{}); }
__device__ inline float RowSum(float v) { return XorTree(v, 8, AddOp{}); }

// Stores a thread's 4 output rows (block rows from r0, scaled by mul[a]) into row-major
// dst(r) of E's type: columns < hs, rows < T.
template <typename E, int HSP, typename RowFn>
__device__ inline void StoreRows(const float (&o)[4][HSP / 16], const float (&mul)[4], int r0, int T, int hs, int ty,
                                 int tx, RowFn dst) {
GANTRY_UNROLL
  for (int a = 0; a < 4; ++a) {
    const int r = r0 + 4 * ty + a;
    if (r >= T) continue;
    typename E::T* row = dst(r);
GANTRY_UNROLL
    for (int c = 0; c < Geometry<HSP>::kCols; ++c) {
      const int col = Geometry<HSP>::Col(tx, c);
      if (col < hs) row[col] = E::St(o[a][c] * mul[a]);
    }
  }
}

// grid (ceil(T / 64), B * NH), 256 threads. qkv (B, T, 3C) → out (B, T, C), lse (B, NH, T).
// round_bits (kernels/cuda/round.cuh): the weights exp(s - m) rounded to that type before they
// weigh V, their sum kept unrounded, as 16-bit flash attention computes (mixed precision).
template <typename E, int HSP>
__global__ void __launch_bounds__(kThreads)
    FlashForwardKernel(typename E::T* out, float* lse, const typename E::T* qkv, int B, int T, int NH, int hs,
                       float scale, int round_bits) {
  using G = Geometry<HSP>;
  GANTRY_DYNAMIC_SHARED(sm);
  float* Qt = sm;                    // the block's queries, transposed
  float* KP = Qt + HSP * kTStride;   // a tile's keys, transposed; then its weights, transposed
  float* Vs = KP + G::kTransposed;   // a tile's values, row-major
  const int C = NH * hs, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int i0 = (gridDim.x - 1 - blockIdx.x) * kBlock;  // the longest rows first
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  LoadTile<E, HSP, true>(Qt, i0, T, hs, [&](int i) { return QkvRow(qkv, b, i, T, 0, h, C, hs); });
  float o[4][G::kCols] = {};
  float m[4], l[4];
GANTRY_UNROLL
  for (int a = 0; a < 4; ++a) m[a] = -INFINITY, l[a] = 0.f;
  for (int j0 = 0; j0 <= i0; j0 += kBlock) {  // up to the diagonal tile (j0 = i0)
    __syncthreads();  // the queries are in; the previous tile's weights and values are consumed
    LoadTile<E, HSP, true>(KP, j0, T, hs, [&](int j) { return QkvRow(qkv, b, j, T, 1, h, C, hs); });
    LoadTile<E, HSP, false>(Vs, j0, T, hs, [&](int j) { return QkvRow(qkv, b, j, T, 2, h, C, hs); });
    __syncthreads();
    float s[4][4] = {};
    TileProduct<HSP>(s, Qt, KP, ty, tx);
GANTRY_UNROLL
    for (int a = 0; a < 4; ++a) {
      const int i = i0 + 4 * ty + a;
      float mt = -INFINITY;
GANTRY_UNROLL
      for (int b2 = 0; b2 < 4; ++b2) {
        const int j = j0 + 4 * tx + b2;
        if (j <= i) mt = fmaxf(mt, s[a][b2] * scale);
      }
      // Finite: key j0 <= i is in every tile up to the diagonal one (rows past T too).
      const float m_new = fmaxf(m[a], RowMax(mt));
      const float corr = expf(m[a] - m_new);  // 0 on the first tile (m = -inf)
      float sum = 0.f;
GANTRY_UNROLL
      for (int b2 = 0; b2 < 4; ++b2) {
        const float p = j0 + 4 * tx + b2 <= i ? expf(fmaf(s[a][b2], scale, -m_new)) : 0.f;
        sum += p;
        s[a][b2] = RoundBits(p, round_bits);
      }
      l[a] = fmaf(l[a], corr, sum);
GANTRY_UNROLL
      for (int c = 0; c < G::kCols; ++c) o[a][c] *= corr;
      m[a] = m_new;
    }
    __syncthreads();  // the keys are consumed
    StoreTransposed(KP, s, ty, tx);
    __syncthreads();
    AccumulateRows<HSP>(o, KP, Vs, ty, tx, min(kBlock, T - j0));
  }
GANTRY_UNROLL
  for (int a = 0; a < 4; ++a) l[a] = RowSum(l[a]);
  // o / l, divided (o * (1 / l) would round twice).
GANTRY_UNROLL
  for (int a = 0; a < 4; ++a) {
    const int i = i0 + 4 * ty + a;
    if (i >= T) continue;
    typename E::T* dst = out + (static_cast<int64_t>(b) * T + i) * C + static_cast<int64_t>(h) * hs;
GANTRY_UNROLL
    for (int c = 0; c < G::kCols; ++c) {
      const int col = G::Col(tx, c);
      if (col < hs) dst[col] = E::St(o[a][c] / l[a]);
    }
    if (tx == 0) lse[static_cast<int64_t>(bh) * T + i] = m[a] + logf(l[a]);
  }
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
  for (int d = lane; d < hs; d += 32) s = fmaf(E::Ld(dout[at + d]), E::Ld(out[at + d]), s);
  s = WarpSum(s);
  if (lane == 0) D[row] = s;
}

// dQ: a block per 64 query rows, keys j <= i streamed. ds_ij = p_ij (dout_i · v_j - D_i),
// dq_i = scale * sum_j ds_ij k_j. Writes dqkv's q part.
template <typename E, int HSP>
__global__ void __launch_bounds__(kThreads)
    FlashBackwardQKernel(typename E::T* dqkv, const typename E::T* dout, const typename E::T* qkv, const float* lse,
                         const float* D, int B, int T, int NH, int hs, float scale) {
  using G = Geometry<HSP>;
  GANTRY_DYNAMIC_SHARED(sm);
  float* Qt = sm;                   // the block's queries, transposed
  float* Gt = Qt + HSP * kTStride;  // their output gradients, transposed
  float* A = Gt + HSP * kTStride;   // a tile's values, transposed; then its ds, transposed
  float* Ks = A + G::kTransposed;   // a tile's keys, transposed; then row-major
  const int C = NH * hs, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int i0 = (gridDim.x - 1 - blockIdx.x) * kBlock;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const auto dout_row = [&](int i) {
    return dout + (static_cast<int64_t>(b) * T + i) * C + static_cast<int64_t>(h) * hs;
  };
  LoadTile<E, HSP, true>(Qt, i0, T, hs, [&](int i) { return QkvRow(qkv, b, i, T, 0, h, C, hs); });
  LoadTile<E, HSP, true>(Gt, i0, T, hs, dout_row);
  float lse_r[4], D_r[4];
GANTRY_UNROLL
  for (int a = 0; a < 4; ++a) {
    const int i = i0 + 4 * ty + a;
    lse_r[a] = i < T ? lse[static_cast<int64_t>(bh) * T + i] : 0.f;
    D_r[a] = i < T ? D[static_cast<int64_t>(bh) * T + i] : 0.f;
  }
  float dq[4][G::kCols] = {};
  const auto key_row = [&](int j) { return QkvRow(qkv, b, j, T, 1, h, C, hs); };
  for (int j0 = 0; j0 <= i0; j0 += kBlock) {
    __syncthreads();
    LoadTile<E, HSP, true>(Ks, j0, T, hs, key_row);
    LoadTile<E, HSP, true>(A, j0, T, hs, [&](int j) { return QkvRow(qkv, b, j, T, 2, h, C, hs); });
    __syncthreads();
    float s[4][4] = {}, dp[4][4] = {};
    TileProduct<HSP>(s, Qt, Ks, ty, tx);
    TileProduct<HSP>(dp, Gt, A, ty, tx);
GANTRY_UNROLL
    for (int a = 0; a < 4; ++a) {
GANTRY_UNROLL
      for (int b2 = 0; b2 < 4; ++b2) {
        const int i = i0 + 4 * ty + a, j = j0 + 4 * tx + b2;
        float ds = 0.f;
        if (j <= i) ds = expf(fmaf(s[a][b2], scale, -lse_r[a])) * (dp[a][b2] - D_r[a]);
        s[a][b2] = ds;
      }
    }
    __syncthreads();  // the transposed keys and values are consumed
    StoreTransposed(A, s, ty, tx);
    LoadTile<E, HSP, false>(Ks, j0, T, hs, key_row);
    __syncthreads();
    AccumulateRows<HSP>(dq, A, Ks, ty, tx, min(kBlock, T - j0));
  }
  const float mul[4] = {scale, scale, scale, scale};
  StoreRows<E, HSP>(dq, mul, i0, T, hs, ty, tx, [&](int i) {
    return dqkv + (static_cast<int64_t>(b) * T + i) * 3 * C + static_cast<int64_t>(h) * hs;
  });
}

// dK, dV: a block per 64 key rows, queries i >= j streamed. dv_j = sum_i p_ij dout_i,
// dk_j = scale * sum_i ds_ij q_i. Writes dqkv's k and v parts.
template <typename E, int HSP>
__global__ void __launch_bounds__(kThreads)
    FlashBackwardKVKernel(typename E::T* dqkv, const typename E::T* dout, const typename E::T* qkv, const float* lse,
                          const float* D, int B, int T, int NH, int hs, float scale) {
  using G = Geometry<HSP>;
  GANTRY_DYNAMIC_SHARED(sm);
  float* Kt = sm;                   // the block's keys, transposed
  float* Vt = Kt + HSP * kTStride;  // its values, transposed
  float* X = Vt + HSP * kTStride;   // a tile's queries, transposed; then p, [query][key]
  float* Y = X + G::kTransposed;    // its output gradients, transposed; then ds, [query][key]
  float* Qs = Y + G::kTransposed;   // its queries, row-major
  float* Gs = Qs + G::kRows;        // its output gradients, row-major
  float* Ls = Gs + G::kRows;        // lse of its queries
  float* Ds = Ls + kBlock;          // D of its queries
  const int C = NH * hs, bh = blockIdx.y, b = bh / NH, h = bh % NH;
  const int j0 = blockIdx.x * kBlock;  // the first blocks have the most queries: they go first
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const auto query_row = [&](int i) { return QkvRow(qkv, b, i, T, 0, h, C, hs); };
  const auto dout_row = [&](int i) {
    return dout + (static_cast<int64_t>(b) * T + i) * C + static_cast<int64_t>(h) * hs;
  };
  LoadTile<E, HSP, true>(Kt, j0, T, hs, [&](int j) { return QkvRow(qkv, b, j, T, 1, h, C, hs); });
  LoadTile<E, HSP, true>(Vt, j0, T, hs, [&](int j) { return QkvRow(qkv, b, j, T, 2, h, C, hs); });
  float dk[4][G::kCols] = {}, dv[4][G::kCols] = {};
  for (int q0 = j0; q0 < T; q0 += kBlock) {  // queries before j0 see none of the block's keys
    __syncthreads();
    LoadTile<E, HSP, true>(X, q0, T, hs, query_row);
    LoadTile<E, HSP, true>(Y, q0, T, hs, dout_row);
    LoadTile<E, HSP, false>(Qs, q0, T, hs, query_row);
    LoadTile<E, HSP, false>(Gs, q0, T, hs, dout_row);
    if (threadIdx.x < kBlock) {
      const int i = q0 + threadIdx.x;
      Ls[threadIdx.x] = i < T ? lse[static_cast<int64_t>(bh) * T + i] : 0.f;
      Ds[threadIdx.x] = i < T ? D[static_cast<int64_t>(bh) * T + i] : 0.f;
    }
    __syncthreads();
    float s[4][4] = {}, dp[4][4] = {};  // [key 4ty + a][query 4tx + b]
    TileProduct<HSP>(s, Kt, X, ty, tx);
    TileProduct<HSP>(dp, Vt, Y, ty, tx);
GANTRY_UNROLL
    for (int a = 0; a < 4; ++a) {
GANTRY_UNROLL
      for (int b2 = 0; b2 < 4; ++b2) {
        const int j = j0 + 4 * ty + a, q = 4 * tx + b2, i = q0 + q;
        float p = 0.f, ds = 0.f;
        if (i >= j && i < T) {
          p = expf(fmaf(s[a][b2], scale, -Ls[q]));
          ds = p * (dp[a][b2] - Ds[q]);
        }
        s[a][b2] = p, dp[a][b2] = ds;
      }
    }
    __syncthreads();  // the transposed queries and gradients are consumed
    StoreTransposed(X, s, ty, tx);
    StoreTransposed(Y, dp, ty, tx);
    __syncthreads();
    AccumulateRows<HSP>(dv, X, Gs, ty, tx, min(kBlock, T - q0));
    AccumulateRows<HSP>(dk, Y, Qs, ty, tx, min(kBlock, T - q0));
  }
  const float ones[4] = {1.f, 1.f, 1.f, 1.f}, scales[4] = {scale, scale, scale, scale};
  const auto row = [&](int j) { return dqkv + (static_cast<int64_t>(b) * T + j) * 3 * C + static_cast<int64_t>(h) * hs; };
  StoreRows<E, HSP>(dk, scales, j0, T, hs, ty, tx, [&](int j) { return row(j) + C; });
  StoreRows<E, HSP>(dv, ones, j0, T, hs, ty, tx, [&](int j) { return row(j) + 2 * C; });
}

// Dynamic shared memory of each kernel, in bytes, for padded head size HSP (the launchers
// raise a launch's limit past 48 KB: 50 KB, 68 KB and 100 KB at HSP 64; 100 KB, 136 KB and
// 200 KB at 128).
template <int HSP>
constexpr size_t ForwardSharedBytes() {
  return sizeof(float) * (HSP * kTStride + Geometry<HSP>::kTransposed + Geometry<HSP>::kRows);
}
template <int HSP>
constexpr size_t BackwardQSharedBytes() {
  return sizeof(float) * (2 * HSP * kTStride + 2 * Geometry<HSP>::kTransposed);
}
template <int HSP>
constexpr size_t BackwardKVSharedBytes() {
  return sizeof(float) * (2 * HSP * kTStride + 2 * Geometry<HSP>::kTransposed + 2 * Geometry<HSP>::kRows + 2 * kBlock);
}

// Host: f(std::integral_constant<int, HSP>{}) for head size hs's instantiation.
template <typename F>
decltype(auto) WithHead(int hs, F&& f) {
  switch (PaddedHead(hs)) {
    case 16:
      return std::forward<F>(f)(std::integral_constant<int, 16>{});
    case 32:
      return std::forward<F>(f)(std::integral_constant<int, 32>{});
    case 64:
      return std::forward<F>(f)(std::integral_constant<int, 64>{});
  }
  return std::forward<F>(f)(std::integral_constant<int, 128>{});
}

}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS::flash
