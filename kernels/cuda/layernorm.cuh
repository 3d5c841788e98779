// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
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

// dout of E's type (read exactly); dinp16 (16-bit E only; null: none) = dinp's new values rounded.
template <typename E>
__global__ void LayerNormBackwardInputKernel(float* dinp, const typename E::T* dout, const float* inp, const float* w,
                                             const float* mean, const float* rstd, int N, int C,
                                             typename E::T* dinp16) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const typename E::T* dy = dout + static_cast<int64_t>(row) * C;
  const float* x = inp + static_cast<int64_t>(row) * C;
  const float m = mean[row], r = rstd[row];
  float sdn = 0.f, sdnx = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float dn = w[c] * E::Ld(dy[c]);
    sdn += dn;
    sdnx += dn * (x[c] - m) * r;
  }
  sdn = WarpSum(sdn) / C;
  sdnx = WarpSum(sdnx) / C;
  float* dx = dinp + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * r;
    dx[c] += (w[c] * E::Ld(dy[c]) - sdn - norm * sdnx) * r;
    if (dinp16 != nullptr) dinp16[static_cast<int64_t>(row) * C + c] = E::St(dx[c]);
  }
}

// LayerNorm's rows for the one-pass backward (norm_backward.cuh): the parameter gradients
// dweight (dy norm) and dbias (dy), the row's sums of w dy and w dy norm, norm = (x - m) r.
struct LayerNormBackwardRows {
  static constexpr int kParams = 2;
  const float *mean, *rstd;
  struct Row {
    float m, r, sdn, sdnx;
  };
  __device__ Row Start(int row) const { return {mean[row], rstd[row], 0.f, 0.f}; }
  __device__ void Add(Row& s, float w, float dy, float x, float (&p)[kParams]) const {
    const float norm = (x - s.m) * s.r;
    const float dn = w * dy;
    s.sdn += dn;
    s.sdnx += dn * norm;
    p[0] += dy * norm;
    p[1] += dy;
  }
  __device__ void Reduce(Row& s, int C) const {
    s.sdn = WarpSum(s.sdn) / C;
    s.sdnx = WarpSum(s.sdnx) / C;
  }
  __device__ float Dx(const Row& s, float w, float dy, float x) const {
    return (w * dy - s.sdn - (x - s.m) * s.r * s.sdnx) * s.r;
  }
};

// (dy * norm, dy) of one element: LayerNorm's dweight and dbias terms (dy of E's type).
template <typename E>
struct LayerNormParamGrads {
  const typename E::T* dout;
  const float *inp, *mean, *rstd;
  int C;
  __device__ float2 operator()(int r, int c) const {
    const int64_t i = static_cast<int64_t>(r) * C + c;
    const float dy = E::Ld(dout[i]);
    return make_float2(dy * (inp[i] - mean[r]) * rstd[r], dy);
  }
};

}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS
