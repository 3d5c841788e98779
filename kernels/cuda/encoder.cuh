// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Token + position embedding kernels (fp32), the twins of kernels/cpu/encoder.cc. Device code
// only (encoder.cu launches it; tests/kernels/backend_ops_test.cc runs it on the CPU).
#pragma once

#include "kernels/cuda/ns.h"

#include <cstdint>

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/reduce.cuh"

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

// wte's gradient: a warp per (32 columns, residue k of the token ids mod `groups`, the
// grid's y; WteGroups). Its lanes read 32 token ids at a time; a ballot marks those of residue k in this
// rank's rows, and for each of them in (b, t) order every lane adds its column of that row of
// dout into the token's row of dwte. So each element of dwte has one thread, adding its rows
// in (b, t) order, as on the CPU: no atomics, the same sums. (A thread that read every token
// id itself took 5.4 ms of a GPT-2 step on an H200: 65,536 ids each, 2,048 read-modify-writes
// in a chain.)
// The residues: enough that each warp's chain of read-modify-writes is short (BT / groups
// rows), few enough that each warp's reading of all BT ids stays cheap: BT / 256, 1 to 256.
inline int WteGroups(int BT) { return BT / 256 < 1 ? 1 : BT / 256 > 256 ? 256 : BT / 256; }
__global__ void EncoderBackwardWteKernel(float* __restrict__ dwte, const float* __restrict__ dout,
                                         const int32_t* __restrict__ inp, int v_begin, int v_end, int BT, int C,
                                         int groups) {
  const int lane = threadIdx.x % 32;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int k = blockIdx.y;
  for (int bt0 = 0; bt0 < BT; bt0 += 32) {  // every lane of the warp, for the ballot and shuffles
    const int bt = bt0 + lane;
    const int tok = bt < BT ? inp[bt] : -1;
    unsigned mask = __ballot_sync(0xffffffffu, tok >= v_begin && tok < v_end && tok % groups == k);
    while (mask != 0) {
      const int j = __ffs(mask) - 1;
      mask &= mask - 1;
      const int t = __shfl_sync(0xffffffffu, tok, j);
      if (c < C) dwte[static_cast<int64_t>(t - v_begin) * C + c] += dout[static_cast<int64_t>(bt0 + j) * C + c];
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

}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS
