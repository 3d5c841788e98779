// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The gradient norm's sum of squares and the clip's scaling, the twins of
// kernels/cpu/grad_norm.cc. Device code only (grad_norm.cu launches it;
// tests/kernels/backend_ops_test.cc runs it on the CPU).
#pragma once

#include "kernels/cuda/ns.h"

#include <cstdint>

#include "kernels/cuda/reduce.cuh"
#include "kernels/grad_norm.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {  // one translation unit each

// SumSquaresPartialKernel's grid: a block of 1024 threads per 1024 elements, at most 1024.
inline int SumSquaresBlocks(int64_t n) {
  const int64_t b = (n + 1023) / 1024;
  return static_cast<int>(b < 1 ? 1 : b > 1024 ? 1024 : b);
}

__global__ void SumSquaresPartialKernel(float* partial, const float* g, int64_t n) {
  float s = 0.f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    s += g[i] * g[i];
  }
  s = BlockSum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void SumSquaresFinishKernel(double* result, const float* partial, int blocks) {
  if (threadIdx.x != 0) return;
  double s = 0.0;
  for (int b = 0; b < blocks; ++b) s += partial[b];
  *result = s;
}

// The clip's multiplier and the norm from the sum of squares: one thread, kernels/grad_norm.h's
// rule (the host's, in the same double and float steps).
__global__ void ClipMultiplierKernel(float* multiplier, double* norm, const double* sum_sq, float max_norm,
                                     float inv_scale) {
  if (threadIdx.x != 0) return;
  *multiplier = kernels::clip_multiplier(*sum_sq, max_norm, inv_scale, norm);
}

__global__ void ScaleKernel(float* g, int64_t n, float s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) g[i] *= s;
}

}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS
