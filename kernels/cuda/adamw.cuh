// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Fused AdamW on fp32 master weights, the twin of kernels/cpu/adamw.cc. Device code only
// (adamw.cu launches it; tests/kernels/backend_ops_test.cc runs it on the CPU).
#pragma once

#include "kernels/cuda/ns.h"

#include <cmath>
#include <cstdint>

#include "kernels/adamw.h"
#include "kernels/cuda/round.cuh"

namespace gantry::GANTRY_CUDA_NS {
namespace {  // one translation unit each

// One element's update, the twin of kernels/cpu/adamw.cc's loop body (AdamWSpansKernel's).
__device__ inline float AdamWElement(float p, float g, float* m, float* v, float beta1, float beta2, float eps,
                                     float step_size, float bc2_sqrt, float decay) {
  const float mi = beta1 * *m + (1.0f - beta1) * g;
  const float vi = beta2 * *v + (1.0f - beta2) * g * g;
  *m = mi;
  *v = vi;
  const float denom = sqrtf(vi) / bc2_sqrt + eps;
  return p * decay - step_size * mi / denom;
}

// Up to kAdamWBatch spans of a multi-tensor AdamW, passed by value: span k's blocks are
// first_block[k] .. first_block[k + 1] - 1 (first_block[count] = the grid's blocks).
constexpr int kAdamWBatch = 32;
struct AdamWBatch {
  float* params[kAdamWBatch];
  const float* grads[kAdamWBatch];
  float* m[kAdamWBatch];
  float* v[kAdamWBatch];
  uint16_t* working[kAdamWBatch];  // null: none
  int64_t n[kAdamWBatch];
  float decay[kAdamWBatch];
  uint32_t first_block[kAdamWBatch + 1];
  int count;
  int working_bits;  // 16 bf16, 10 fp16
};

__global__ void AdamWSpansKernel(AdamWBatch b, float beta1, float beta2, float eps, float step_size, float bc2_sqrt,
                                 const float* grad_scale) {
  int k = 0;  // the span of this block
  while (k + 1 < b.count && b.first_block[k + 1] <= blockIdx.x) ++k;
  const int64_t i = static_cast<int64_t>(blockIdx.x - b.first_block[k]) * blockDim.x + threadIdx.x;
  if (i >= b.n[k]) return;
  const float g = grad_scale != nullptr ? b.grads[k][i] * *grad_scale : b.grads[k][i];
  const float p = AdamWElement(b.params[k][i], g, b.m[k] + i, b.v[k] + i, beta1, beta2, eps, step_size, bc2_sqrt,
                               b.decay[k]);
  b.params[k][i] = p;
  if (b.working[k] != nullptr) b.working[k][i] = b.working_bits == 16 ? Bf16Bits(p) : Fp16Bits(p);
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
