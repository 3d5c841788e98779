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

// A job's AdamW hyper-parameters (torch.optim.AdamW's), one definition for the trainer, the
// GPU path and the shard servers' parameter-server mode; Params gives one update's.
struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  // The update at learning rate lr, 1-based step; decay: the tensor takes weight decay.
  AdamWParams Params(double lr, int64_t step, bool decay) const {
    return {static_cast<float>(lr), static_cast<float>(beta1), static_cast<float>(beta2), static_cast<float>(eps),
            decay ? static_cast<float>(weight_decay) : 0.f, static_cast<int>(step)};
  }
};

// params (N), grads (N), m (N), v (N) → params, m, v updated in place
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t N,
                  const AdamWParams& hp);

}  // namespace gantry::kernels
