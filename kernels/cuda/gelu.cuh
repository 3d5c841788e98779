// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// GELU, tanh form, and its derivative, as the CPU twin (kernels/cpu/gelu.cc) computes them.
#pragma once

#include "kernels/cuda/ns.h"

namespace gantry::GANTRY_CUDA_NS {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// Every product that feeds a sum is an explicit fmaf and no other product does, so that no
// compiler contracts these differently in the kernels that inline them (nvcc and the emulated
// build's GCC contract a * b + c freely: the fused GELU backward of a matmul and the plain one
// gave other bits once they were vectorised differently).
__device__ inline float Gelu(float x) {
  const float u = kGeluSqrt2OverPi * fmaf(kGeluCubic * x * x, x, x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// d gelu(x) / dx
__device__ inline float GeluGrad(float x) {
  const float th = tanhf(kGeluSqrt2OverPi * fmaf(kGeluCubic * x * x, x, x));
  const float du = kGeluSqrt2OverPi * fmaf(3.0f * kGeluCubic * x, x, 1.0f);
  return fmaf(0.5f * x * fmaf(-th, th, 1.0f), du, 0.5f * (1.0f + th));
}

}  // namespace gantry::GANTRY_CUDA_NS
