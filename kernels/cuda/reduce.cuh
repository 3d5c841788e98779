// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Warp and block reductions for the CUDA kernels (device code only).
#pragma once

#include "kernels/cuda/ns.h"

namespace gantry::GANTRY_CUDA_NS {

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// The xor butterfly over each aligned group of 2·first lanes (first a power of two, at most
// 16): every lane ends with op over its group, each lane combining its own value first. Under
// the emulator (kernels/emulated/device.h) the same tree from one exchange of the warp's
// values (emu::XorTree: the same operations, the same bits) rather than a barrier a level.
template <typename Op>
__device__ inline float XorTree(float v, int first, Op op) {
#ifdef __CUDACC__
  for (int o = first; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
#else
  return emu::XorTree(v, static_cast<unsigned>(first), op);
#endif
}

__device__ inline float WarpSum(float v) { return XorTree(v, 16, AddOp{}); }
__device__ inline float WarpMax(float v) { return XorTree(v, 16, MaxOp{}); }

// Block-wide sum (blockDim.x a multiple of 32, at most 1024); every thread gets it. Safe to
// call several times in a row.
__device__ inline float BlockSum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = WarpSum(v);
  __syncthreads();  // the previous call's readers are done with part
  if (lane == 0) part[warp] = v;
  __syncthreads();
  return WarpSum(lane < warps ? part[lane] : 0.f);
}

__device__ inline float BlockMax(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  return WarpMax(lane < warps ? part[lane] : -INFINITY);
}

inline unsigned CeilDiv(int64_t n, int64_t d) { return static_cast<unsigned>((n + d - 1) / d); }

}  // namespace gantry::GANTRY_CUDA_NS
