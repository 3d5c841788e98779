// Global gradient norm and clipping (torch.nn.utils.clip_grad_norm_ semantics).
#pragma once
#include <cstdint>

namespace gantry::kernels {

// g (N) → sum of squares, accumulated in double over fixed 4096-element chunks summed in
// order: the same bits whatever the thread count.
double sum_squares(const float* g, int64_t N);

// g (N) *= s
void scale_inplace(float* g, int64_t N, float s);

// The clip coefficient: min(1, max_norm / (norm + 1e-6)); max_norm <= 0 means no clipping.
float clip_coefficient(double norm, float max_norm);

}  // namespace gantry::kernels
