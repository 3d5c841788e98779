// Elementwise kernels (GELU, residual, scale, conversions), the twins of kernels/cpu/gelu.cc,
// kernels/cpu/residual.cc and kernels/cpu/cast.cc. Device code only: elementwise.cu launches it
// (kernels/emulated/launchers/elementwise.cc for the emulator). GELU and the conversions are
// templates over the element types (elem.cuh): fp32 inside, the stored value rounded once.
#pragma once

#include "kernels/cuda/ns.h"

#include <cstdint>

#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/round.cuh"

namespace gantry::GANTRY_CUDA_NS {
namespace {  // one translation unit each

constexpr int kBlock = 256;

// inp (n) → out (n), all of E's type (out may be inp).
template <typename E>
__global__ void GeluForwardKernel(typename E::T* out, const typename E::T* inp, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = E::St(Gelu(E::Ld(inp[i])));
}

// inp (n), dout (n) → dinp (n) = gelu'(inp) dout, all of E's type (dinp may be dout).
template <typename E>
__global__ void GeluBackwardKernel(typename E::T* dinp, const typename E::T* inp, const typename E::T* dout,
                                   int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] = E::St(GeluGrad(E::Ld(inp[i])) * E::Ld(dout[i]));
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

// in (n) of EI's type → out (n) of EO's: widened exactly, then rounded to EO's type (ties to
// even; a NaN stays a quiet NaN), the twin of kernels/cpu/cast.cc's convert.
template <typename EO, typename EI>
__global__ void ConvertKernel(typename EO::T* out, const typename EI::T* in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = EO::St(EI::Ld(in[i]));
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
