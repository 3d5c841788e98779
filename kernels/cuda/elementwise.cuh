// Elementwise kernels (GELU, residual, scale), the twins of kernels/cpu/gelu.cc and
// kernels/cpu/residual.cc. Device code only: elementwise.cu launches it, and
// tests/kernels/backend_ops_test.cc runs it on the CPU under kernels/emulated/device.h.
#pragma once

#include "kernels/cuda/ns.h"

#include <cstdint>

#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/round.cuh"

namespace gantry::GANTRY_CUDA_NS {
namespace {  // one translation unit each

constexpr int kBlock = 256;

__global__ void GeluForwardKernel(float* out, const float* inp, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = Gelu(inp[i]);
}

__global__ void GeluBackwardKernel(float* dinp, const float* inp, const float* dout, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] = GeluGrad(inp[i]) * dout[i];
}

__global__ void ResidualForwardKernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void ResidualBackwardKernel(float* da, float* db, const float* dout, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  da[i] += dout[i];
  db[i] += dout[i];
}

// fp32 ↔ bf16 (held as uint16_t), the twins of kernels/cast.h: round to nearest, ties to
// even; a NaN stays a (quiet) NaN.
__global__ void CastToBf16Kernel(uint16_t* out, const float* in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = static_cast<uint16_t>(__float_as_uint(RoundBf16(in[i])) >> 16);  // its low half is zero
}

__global__ void CastFromBf16Kernel(float* out, const uint16_t* in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __uint_as_float(static_cast<uint32_t>(in[i]) << 16);
}

__global__ void RoundToKernel(float* out, const float* in, int bits, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = RoundBits(in[i], bits);
}

__global__ void ScaleKernel(float* g, int64_t n, float s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) g[i] *= s;
}

}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS
