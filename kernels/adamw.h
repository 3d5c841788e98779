// AdamW with decoupled weight decay and bias correction (torch.optim.AdamW's update).
#pragma once
#include <cstdint>

namespace gantry::kernels {

struct AdamWParams {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  // 0 for tensors that take no decay (biases, LayerNorm, < 2 dims)
  int step;            // 1-based, for bias correction
};

// params (N), grads (N), m (N), v (N) → params, m, v updated in place
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t N,
                  const AdamWParams& hp);

}  // namespace gantry::kernels
