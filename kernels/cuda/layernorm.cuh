// LayerNorm kernels (fp32; the output fp32 or 16-bit), the twins of kernels/cpu/layernorm.cc.
// Device code only (layernorm.cu launches it; tests/kernels/backend_ops_test.cc runs it on the
// CPU).
#pragma once

#include "kernels/cuda/ns.h"

#include <cstdint>

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/norm_rows.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/layernorm.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {  // one translation unit each

// One warp per row (norm_rows.cuh's walk: 16-byte loads and stores where vec). out of E's type:
// the fp32 value (x - m) r w + b rounded once. With add (the residual add fused with the norm),
// x = inp + add, written to sum and normalised from there: the same code and order of sums either
// way, so the fused op gives the bits of ResidualForward then LayerNormForward.
template <typename E>
__global__ void LayerNormForwardKernel(typename E::T* out, float* mean, float* rstd, float* sum, const float* inp,
                                       const float* add, const float* w, const float* bias, int N, int C, bool vec) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t off = static_cast<int64_t>(row) * C;
  const int c0 = kRowSpan * lane, step = 32 * kRowSpan;
  float s = 0.f;
  for (int c = c0; c < C; c += step) {
    float u[8];
    LoadRowAdd8(u, inp, add, sum, off, c, C, vec);
    for (int k = 0; k < kRowSpan && c + k < C; ++k) s += u[k];
  }
  const float m = WarpSum(s) / C;
  const float* x = (add != nullptr ? sum : inp) + off;
  float v = 0.f;
  for (int c = c0; c < C; c += step) {
    float u[8];
    LoadRow8(x, c, C, vec, u);
    for (int k = 0; k < kRowSpan && c + k < C; ++k) {
      const float d = u[k] - m;
      v += d * d;
    }
  }
  const float r = rsqrtf(WarpSum(v) / C + kernels::kLayerNormEps);
  typename E::T* o = out + off;
  for (int c = c0; c < C; c += step) {
    float u[8], wv[8], bv[8];
    LoadRow8(x, c, C, vec, u);
    LoadRow8(w, c, C, vec, wv);
    LoadRow8(bias, c, C, vec, bv);
    for (int k = 0; k < kRowSpan; ++k) u[k] = (u[k] - m) * r * wv[k] + bv[k];
    StoreRow8<E>(o, c, C, vec, u);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void LayerNormBackwardInputKernel(float* dinp, const float* dout, const float* inp, const float* w,
                                             const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* dy = dout + static_cast<int64_t>(row) * C;
  const float* x = inp + static_cast<int64_t>(row) * C;
  const float m = mean[row], r = rstd[row];
  float sdn = 0.f, sdnx = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float dn = w[c] * dy[c];
    sdn += dn;
    sdnx += dn * (x[c] - m) * r;
  }
  sdn = WarpSum(sdn) / C;
  sdnx = WarpSum(sdnx) / C;
  float* dx = dinp + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * r;
    dx[c] += (w[c] * dy[c] - sdn - norm * sdnx) * r;
  }
}

// LayerNorm's backward in one pass over dout and inp, for C a multiple of 4 up to 128 J: a warp
// per row, each lane the 4 consecutive columns at 128 j + 4 lane (16-byte loads and stores),
// dinp += the input gradient. The rows of block b are [b rows_per_block, ...) and its 8 warps
// take every 8th of them, adding their dweight and dbias terms (dy norm, dy) in registers; the
// warps' sums are then added in warp order and written to partial[b] (C float2s), which
// LayerNormParamsFinishKernel adds up in block order: a fixed order, so the same bits every
// run. Replaces the two passes (the input gradient, then ColumnSums over dout and inp again).
constexpr int kLnWarps = 8;
template <int J>
__global__ void __launch_bounds__(kLnWarps * 32) LayerNormBackwardFusedKernel(
    float* __restrict__ dinp, float2* __restrict__ partial, const float* __restrict__ dout,
    const float* __restrict__ inp, const float* __restrict__ w, const float* __restrict__ mean,
    const float* __restrict__ rstd, int N, int C, int rows_per_block) {
  __shared__ float2 warp_sums[kLnWarps][128];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = blockIdx.x * rows_per_block, r1 = min(N, r0 + rows_per_block);
  float wv[J][4], dw[J][4], db[J][4];
  for (int j = 0; j < J; ++j) {
    const int c = 128 * j + 4 * lane;
    for (int k = 0; k < 4; ++k) wv[j][k] = dw[j][k] = db[j][k] = 0.f;
    if (c < C) LoadF4(w + c, wv[j]);
  }
  for (int row = r0 + warp; row < r1; row += kLnWarps) {
    const float* dy = dout + static_cast<int64_t>(row) * C;
    const float* x = inp + static_cast<int64_t>(row) * C;
    const float m = mean[row], r = rstd[row];
    float sdn = 0.f, sdnx = 0.f;
    for (int j = 0; j < J; ++j) {
      const int c = 128 * j + 4 * lane;
      if (c >= C) continue;
      float yv[4], xv[4];
      LoadF4(dy + c, yv);
      LoadF4(x + c, xv);
      for (int k = 0; k < 4; ++k) {
        const float norm = (xv[k] - m) * r;
        const float dn = wv[j][k] * yv[k];
        sdn += dn;
        sdnx += dn * norm;
        dw[j][k] += yv[k] * norm;
        db[j][k] += yv[k];
      }
    }
    sdn = WarpSum(sdn) / C;
    sdnx = WarpSum(sdnx) / C;
    // The row again (from the cache: the warp read it just now), fewer registers held.
    float* dx = dinp + static_cast<int64_t>(row) * C;
    for (int j = 0; j < J; ++j) {
      const int c = 128 * j + 4 * lane;
      if (c >= C) continue;
      float yv[4], xv[4], g[4];
      LoadF4(dy + c, yv);
      LoadF4(x + c, xv);
      LoadF4(dx + c, g);
      for (int k = 0; k < 4; ++k) g[k] += (wv[j][k] * yv[k] - sdn - (xv[k] - m) * r * sdnx) * r;
      StoreF4(dx + c, g);
    }
  }
  for (int j = 0; j < J; ++j) {
    for (int k = 0; k < 4; ++k) warp_sums[warp][4 * lane + k] = make_float2(dw[j][k], db[j][k]);
    __syncthreads();
    const int c = 128 * j + threadIdx.x;
    if (threadIdx.x < 128 && c < C) {
      float2 t = warp_sums[0][threadIdx.x];
      for (int v = 1; v < kLnWarps; ++v) {
        t.x += warp_sums[v][threadIdx.x].x;
        t.y += warp_sums[v][threadIdx.x].y;
      }
      partial[static_cast<int64_t>(blockIdx.x) * C + c] = t;
    }
    __syncthreads();
  }
}

// dweight[c] += sum over blocks of partial[b][c].x, dbias[c] += of .y, in a fixed order: a
// block of (32, 8) threads per 32 columns, thread (x, y) adding blocks y, y + 8, ... in turn,
// then the 8 sums in y order.
__global__ void LayerNormParamsFinishKernel(float* dweight, float* dbias, const float2* partial, int blocks, int C) {
  __shared__ float2 sums[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float2 t = make_float2(0.f, 0.f);
  if (c < C) {
    for (int b = threadIdx.y; b < blocks; b += 8) {
      t.x += partial[static_cast<int64_t>(b) * C + c].x;
      t.y += partial[static_cast<int64_t>(b) * C + c].y;
    }
  }
  sums[threadIdx.y][threadIdx.x] = t;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < 8; ++y) {
      t.x += sums[y][threadIdx.x].x;
      t.y += sums[y][threadIdx.x].y;
    }
    dweight[c] += t.x;
    dbias[c] += t.y;
  }
}

// (dy * norm, dy) of one element: LayerNorm's dweight and dbias terms.
struct LayerNormParamGrads {
  const float *dout, *inp, *mean, *rstd;
  int C;
  __device__ float2 operator()(int r, int c) const {
    const int64_t i = static_cast<int64_t>(r) * C + c;
    return make_float2(dout[i] * (inp[i] - mean[r]) * rstd[r], dout[i]);
  }
};

}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS
