// Token + position embedding and LayerNorm kernels (fp32; LayerNorm's output fp32 or 16-bit),
// the twins of kernels/cpu/encoder.cc and kernels/cpu/layernorm.cc. Device code only
// (encoder_layernorm.cu launches it; tests/kernels/backend_ops_test.cc runs it on the CPU).
#pragma once

#include "kernels/cuda/ns.h"

#include <cstdint>

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/layernorm.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {  // one translation unit each

// Vocabulary-parallel: wte holds rows [v_begin, v_end); a token outside them embeds 0 here
// (another rank holds it), and wpe (null: another rank adds it) is added to every row.
__global__ void EncoderForwardKernel(float* out, const int32_t* inp, const float* wte, int v_begin, int v_end,
                                     const float* wpe, int BT, int T, int C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(BT) * C) return;
  const int bt = static_cast<int>(i / C), c = static_cast<int>(i % C), t = bt % T, tok = inp[bt];
  const bool here = tok >= v_begin && tok < v_end;
  const float te = here ? wte[static_cast<int64_t>(tok - v_begin) * C + c] : 0.f;
  out[i] = wpe != nullptr ? te + wpe[static_cast<int64_t>(t) * C + c] : te;
}

// wte's gradient: a thread per (column c, residue k of the token ids mod kWteGroups, the
// grid's y), so that each element of dwte has one thread, which adds the rows of dout of
// its token in (b, t) order, as on the CPU: no atomics, the same sums. (One thread per
// column alone left 768 threads to walk 65,536 rows: 31 ms of a 455 ms GPT-2 step.)
constexpr int kWteGroups = 32;
__global__ void EncoderBackwardWteKernel(float* __restrict__ dwte, const float* __restrict__ dout,
                                         const int32_t* __restrict__ inp, int v_begin, int v_end, int BT, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int k = blockIdx.y;
  if (c >= C) return;
  for (int bt = 0; bt < BT; ++bt) {
    const int tok = inp[bt];
    if (tok >= v_begin && tok < v_end && tok % kWteGroups == k) {
      dwte[static_cast<int64_t>(tok - v_begin) * C + c] += dout[static_cast<int64_t>(bt) * C + c];
    }
  }
}

__global__ void EncoderBackwardWpeKernel(float* dwpe, const float* dout, int B, int T, int C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(T) * C) return;
  float s = 0.f;
  for (int b = 0; b < B; ++b) s += dout[static_cast<int64_t>(b) * T * C + i];
  dwpe[i] += s;
}

// One warp per row. out of E's type: the fp32 value (x - m) r w + b rounded once.
template <typename E>
__global__ void LayerNormForwardKernel(typename E::T* out, float* mean, float* rstd, const float* inp, const float* w,
                                       const float* bias, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + static_cast<int64_t>(row) * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += x[c];
  const float m = WarpSum(s) / C;
  float v = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float d = x[c] - m;
    v += d * d;
  }
  const float r = rsqrtf(WarpSum(v) / C + kernels::kLayerNormEps);
  typename E::T* o = out + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = E::St((x[c] - m) * r * w[c] + bias[c]);
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
