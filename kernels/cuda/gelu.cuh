// GELU, tanh form, and its derivative, as the CPU twin (kernels/cpu/gelu.cc) computes them.
#pragma once

#include "kernels/cuda/ns.h"

namespace gantry::GANTRY_CUDA_NS {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__device__ inline float Gelu(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// d gelu(x) / dx
__device__ inline float GeluGrad(float x) {
  const float th = tanhf(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float du = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

}  // namespace gantry::GANTRY_CUDA_NS
