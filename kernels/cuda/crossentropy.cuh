// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The fused classifier (softmax + cross-entropy + its gradient), the twin of
// kernels/cpu/crossentropy.cc. Device code only (crossentropy.cu launches it;
// tests/kernels/backend_ops_test.cc runs it on the CPU). The logits are of an element type E
// (elem.cuh): fp32 or 16-bit, read exactly; max, sums, loss and each gradient value are fp32,
// the gradient rounded once as it is stored (the target's element included: (p - 1) dloss in
// fp32, then rounded).
#pragma once

#include "kernels/cuda/ns.h"

#include <cmath>
#include <cstdint>

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/reduce.cuh"

namespace gantry::GANTRY_CUDA_NS {
namespace {  // one translation unit each

constexpr int kRowThreads = 1024;

// One block per row: the max, the sum of exponentials, the loss; with grad, the row is
// overwritten by (softmax - onehot) * dloss.
// The block's row x (V) of E's type: its max and the sum of exp(x - max), in every thread.
template <typename E>
__device__ inline float2 RowMaxSumExp(const typename E::T* x, int V) {
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < V; i += blockDim.x) mx = fmaxf(mx, E::Ld(x[i]));
  mx = BlockMax(mx);
  float s = 0.f;
  for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(E::Ld(x[i]) - mx);
  return make_float2(mx, BlockSum(s));
}

// logits (N, V) of E's type, targets (N) → losses (N); with kGrad, logits := dlogits.
template <typename E, bool kGrad>
__global__ void CrossEntropyKernel(float* losses, typename E::T* logits, const int32_t* targets, float dloss, int V) {
  typename E::T* x = logits + static_cast<int64_t>(blockIdx.x) * V;
  const float2 ms = RowMaxSumExp<E>(x, V);
  const float mx = ms.x, s = ms.y;
  const int target = targets[blockIdx.x];
  const float xt = E::Ld(x[target]);
  __syncthreads();  // every thread has read x[target] before the row is overwritten
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(s) + mx - xt;
  if (!kGrad) return;
  const float inv = 1.f / s;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    x[i] = E::St((expf(E::Ld(x[i]) - mx) * inv - (i == target ? 1.f : 0.f)) * dloss);
  }
}

// The same for V a multiple of 8 and 16-byte aligned rows: 8 logits a load, and the max and
// the sum of exponentials in one pass (each thread's sum rescaled as its running max grows,
// then the block's sums rescaled to the block's max), so the row is read twice: here and as
// its gradient is written (the issue's "logits at most twice"). The same values up to the
// order of fp32 sums.
template <typename E, bool kGrad>
__global__ void CrossEntropyVec8Kernel(float* losses, typename E::T* logits, const int32_t* targets, float dloss,
                                       int V) {
  typename E::T* x = logits + static_cast<int64_t>(blockIdx.x) * V;
  const int V8 = V / 8;
  float m = -INFINITY, s = 0.f;
  for (int i = threadIdx.x; i < V8; i += blockDim.x) {
    float v[8];
    Load8<E>(x + 8 * i, v);
    float lm = v[0];
    for (int k = 1; k < 8; ++k) lm = fmaxf(lm, v[k]);
    if (lm > m) {
      s *= expf(m - lm);  // m = -inf: s is 0 and stays 0
      m = lm;
    }
    for (int k = 0; k < 8; ++k) s += expf(v[k] - m);
  }
  const float mx = BlockMax(m);
  const float sum = BlockSum(m == -INFINITY ? 0.f : s * expf(m - mx));
  const int target = targets[blockIdx.x];
  const float xt = E::Ld(x[target]);
  __syncthreads();  // every thread has read x[target] before the row is overwritten
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) + mx - xt;
  if (!kGrad) return;
  const float inv = 1.f / sum;
  for (int i = threadIdx.x; i < V8; i += blockDim.x) {
    float v[8];
    Load8<E>(x + 8 * i, v);
    for (int k = 0; k < 8; ++k) v[k] = (expf(v[k] - mx) * inv - (8 * i + k == target ? 1.f : 0.f)) * dloss;
    Store8<E>(x + 8 * i, v);
  }
}

// Vocabulary-parallel classifier (the twins of kernels::crossentropy_shard_stats and
// _finish), one block per row. Stats: this rank's (max, sum of exp(x - max), target logit
// or 0 where another rank holds the target) over its V columns.
template <typename E>
__global__ void CrossEntropyShardStatsKernel(float* stats, const typename E::T* logits, const int32_t* targets, int V,
                                             int v_begin) {
  const typename E::T* x = logits + static_cast<int64_t>(blockIdx.x) * V;
  const float2 ms = RowMaxSumExp<E>(x, V);
  if (threadIdx.x == 0) {
    const int t = targets[blockIdx.x] - v_begin;
    float* out = stats + static_cast<int64_t>(blockIdx.x) * 3;
    out[0] = ms.x;
    out[1] = ms.y;
    out[2] = t >= 0 && t < V ? E::Ld(x[t]) : 0.f;
  }
}

// From every rank's stats (ranks, N, 3): the row's loss and, with dloss != 0, this rank's
// columns of (softmax - onehot) * dloss.
template <typename E>
__global__ void CrossEntropyShardFinishKernel(float* losses, typename E::T* logits, const float* all_stats, int ranks,
                                              const int32_t* targets, float dloss, int N, int V, int v_begin) {
  const int n = blockIdx.x;
  float mx = all_stats[static_cast<int64_t>(n) * 3];
  for (int r = 1; r < ranks; ++r) mx = fmaxf(mx, all_stats[(static_cast<int64_t>(r) * N + n) * 3]);
  float sum = 0.f, tgt = 0.f;
  for (int r = 0; r < ranks; ++r) {
    const float* s = all_stats + (static_cast<int64_t>(r) * N + n) * 3;
    sum += s[1] * expf(s[0] - mx);
    tgt += s[2];
  }
  if (threadIdx.x == 0) losses[n] = logf(sum) + mx - tgt;
  if (dloss == 0.f) return;
  typename E::T* x = logits + static_cast<int64_t>(n) * V;
  const float inv = 1.f / sum;
  const int t = targets[n] - v_begin;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    x[i] = E::St((expf(E::Ld(x[i]) - mx) * inv - (i == t ? 1.f : 0.f)) * dloss);
  }
}

}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS
