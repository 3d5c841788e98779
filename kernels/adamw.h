// AdamW with decoupled weight decay and bias correction (torch.optim.AdamW's update).
#pragma once
#include <cstdint>

#include "kernels/types.h"

namespace gantry::kernels {

// params (N), grads (N), m (N), v (N) → params, m, v updated in place
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t N,
                  const AdamWParams& hp);

}  // namespace gantry::kernels
