// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The gradient norm's sum of squares and the clip's scaling on the GPU, the twins of
// kernels/cpu/grad_norm.cc.
#include "kernels/cuda/grad_norm.cuh"
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/ops.h"
#include <cstdint>

namespace gantry::GANTRY_CUDA_NS {
absl::Status SumSquares(Context& ctx, double* result, const float* g, int64_t N) {
  if (N < 0) return absl::InvalidArgumentError("SumSquares: negative length");
  const int blocks = SumSquaresBlocks(N);
  GANTRY_LAUNCH(SumSquaresPartialKernel, blocks, 1024, 0, ctx.stream())(ctx.scratch(), g, N);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  GANTRY_LAUNCH(SumSquaresFinishKernel, 1, 32, 0, ctx.stream())(result, ctx.scratch(), blocks);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status ClipMultiplier(Context& ctx, float* multiplier, double* norm, const double* sum_sq, float max_norm,
                            float inv_scale) {
  GANTRY_LAUNCH(ClipMultiplierKernel, 1, 32, 0, ctx.stream())(multiplier, norm, sum_sq, max_norm, inv_scale);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status ScaleInplace(Context& ctx, float* g, int64_t N, float s) {
  if (auto st = CheckLength(N); !st.ok()) return st;
  if (N == 0) return absl::OkStatus();
  GANTRY_LAUNCH(ScaleKernel, Blocks(N), kBlock, 0, ctx.stream())(g, N, s);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
