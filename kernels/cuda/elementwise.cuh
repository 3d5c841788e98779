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

// The same, 8 elements a thread (16-byte accesses for 16-bit types): n8 = n / 8, the pointers
// 16-byte aligned.
template <typename E>
__global__ void GeluForward8Kernel(typename E::T* out, const typename E::T* inp, int64_t n8) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  float v[8];
  Load8<E>(inp + 8 * i, v);
  for (int k = 0; k < 8; ++k) v[k] = Gelu(v[k]);
  Store8<E>(out + 8 * i, v);
}

// inp (n), dout (n) → dinp (n) = gelu'(inp) dout, all of E's type (dinp may be dout).
template <typename E>
__global__ void GeluBackwardKernel(typename E::T* dinp, const typename E::T* inp, const typename E::T* dout,
                                   int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] = E::St(GeluGrad(E::Ld(inp[i])) * E::Ld(dout[i]));
}

// The same, 8 elements a thread.
template <typename E>
__global__ void GeluBackward8Kernel(typename E::T* dinp, const typename E::T* inp, const typename E::T* dout,
                                    int64_t n8) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  float x[8], d[8];
  Load8<E>(inp + 8 * i, x);
  Load8<E>(dout + 8 * i, d);
  for (int k = 0; k < 8; ++k) d[k] = GeluGrad(x[k]) * d[k];
  Store8<E>(dinp + 8 * i, d);
}

__global__ void ResidualForwardKernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
// The same, 4 elements a thread (16-byte loads and stores): n4 = n / 4, every pointer 16-byte
// aligned.
__global__ void ResidualForward4Kernel(float* out, const float* a, const float* b, int64_t n4) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float x[4], y[4];
  LoadF4(a + 4 * i, x);
  LoadF4(b + 4 * i, y);
  for (int k = 0; k < 4; ++k) x[k] += y[k];
  StoreF4(out + 4 * i, x);
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
