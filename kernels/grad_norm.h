// Global gradient norm and clipping (torch.nn.utils.clip_grad_norm_ semantics).
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GANTRY_GRAD_NORM_HD __host__ __device__
#else
#define GANTRY_GRAD_NORM_HD
#endif

namespace gantry::kernels {

// g (N) → sum of squares, accumulated in double over fixed 4096-element chunks summed in
// order: the same bits whatever the thread count.
double sum_squares(const float* g, int64_t N);

// g (N) *= s
void scale_inplace(float* g, int64_t N, float s);

// The clip coefficient: min(1, max_norm / (norm + 1e-6)); max_norm <= 0 means no clipping.
GANTRY_GRAD_NORM_HD inline float clip_coefficient(double norm, float max_norm) {
  if (max_norm <= 0.f) return 1.0f;
  const double coef = static_cast<double>(max_norm) / (norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

// What the gradients are multiplied by from their sum of squares: the global norm of the
// unscaled gradients is sqrt(sum_sq) * inv_scale (inv_scale: 1 / the loss scale, a power of
// 2, so exact), and the multiplier clip_coefficient(that norm, max_norm) * inv_scale. One
// definition for the host (ZeroEngine) and the device (the cuda backends' ClipMultiplier).
GANTRY_GRAD_NORM_HD inline float clip_multiplier(double sum_sq, float max_norm, float inv_scale, double* norm_out) {
  const double norm = sqrt(sum_sq) * inv_scale;
  if (norm_out != nullptr) *norm_out = norm;
  return clip_coefficient(norm, max_norm) * inv_scale;
}

}  // namespace gantry::kernels
