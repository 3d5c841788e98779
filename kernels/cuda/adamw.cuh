// Fused AdamW on fp32 master weights, the twin of kernels/cpu/adamw.cc. Device code only
// (adamw.cu launches it; tests/kernels/backend_ops_test.cc runs it on the CPU).
#pragma once

#include "kernels/cuda/ns.h"

#include <cmath>
#include <cstdint>

#include "kernels/adamw.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {  // one translation unit each

__global__ void AdamWKernel(float* params, const float* grads, float* m, float* v, int64_t n,
                            float beta1, float beta2, float eps, float step_size,
                            float bc2_sqrt, float decay, const float* grad_scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grad_scale != nullptr ? grads[i] * *grad_scale : grads[i];
  const float mi = beta1 * m[i] + (1.0f - beta1) * g;
  const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  const float denom = sqrtf(vi) / bc2_sqrt + eps;
  params[i] = params[i] * decay - step_size * mi / denom;
}

// The kernel's scalars for a step: the bias-corrected step size, sqrt of v's bias
// correction, and the decoupled decay factor.
struct AdamWScalars {
  float step_size, bc2_sqrt, decay;
};
inline AdamWScalars AdamWScalarsOf(const kernels::AdamWParams& hp) {
  const float bc1 = 1.0f - std::pow(hp.beta1, static_cast<float>(hp.step));
  const float bc2 = 1.0f - std::pow(hp.beta2, static_cast<float>(hp.step));
  return {hp.lr / bc1, std::sqrt(bc2), 1.0f - hp.lr * hp.weight_decay};
}

}  // namespace
}  // namespace gantry::GANTRY_CUDA_NS
