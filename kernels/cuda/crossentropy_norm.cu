// The fused classifier (softmax + cross-entropy + its gradient) and the gradient norm on the
// GPU, the twins of kernels/cpu/crossentropy.cc and kernels/cpu/grad_norm.cc.
#include "kernels/cuda/crossentropy_norm.cuh"
#include "kernels/cuda/ns.h"

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

absl::Status CheckRows(const char* op, int N, int V) {
  if (N <= 0 || V <= 0) return absl::InvalidArgumentError(absl::StrCat(op, ": bad shape (", N, ", ", V, ")"));
  return absl::OkStatus();
}

}  // namespace

absl::Status CrossEntropyForward(Context& ctx, float* losses, const float* logits, const int32_t* targets, int N,
                                 int V) {
  if (auto s = CheckRows("CrossEntropyForward", N, V); !s.ok()) return s;
  // The forward-only kernel never writes the row.
  GANTRY_LAUNCH(CrossEntropyKernel<false>, N, kRowThreads, 0, ctx.stream())(losses, const_cast<float*>(logits), targets, 0.f, V);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CrossEntropyFusedForwardBackward(Context& ctx, float* losses, float* logits, const int32_t* targets,
                                              float dloss, int N, int V) {
  if (auto s = CheckRows("CrossEntropyFusedForwardBackward", N, V); !s.ok()) return s;
  GANTRY_LAUNCH(CrossEntropyKernel<true>, N, kRowThreads, 0, ctx.stream())(losses, logits, targets, dloss, V);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CrossEntropyShardStats(Context& ctx, float* stats, const float* logits, const int32_t* targets, int N,
                                   int V, int v_begin) {
  if (N <= 0 || V <= 0) return absl::InvalidArgumentError(absl::StrCat("CrossEntropyShardStats: bad shape (", N, ", ", V, ")"));
  GANTRY_LAUNCH(CrossEntropyShardStatsKernel, N, kRowThreads, 0, ctx.stream())(stats, logits, targets, V, v_begin);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CrossEntropyShardFinish(Context& ctx, float* losses, float* logits, const float* all_stats, int ranks,
                                    const int32_t* targets, float dloss, int N, int V, int v_begin) {
  if (N <= 0 || V <= 0 || ranks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("CrossEntropyShardFinish: bad shape (", N, ", ", V, ", ", ranks, " ranks)"));
  }
  GANTRY_LAUNCH(CrossEntropyShardFinishKernel, N, kRowThreads, 0, ctx.stream())(losses, logits, all_stats, ranks,
                                                                               targets, dloss, N, V, v_begin);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status SumSquares(Context& ctx, double* result, const float* g, int64_t N) {
  if (N < 0) return absl::InvalidArgumentError("SumSquares: negative length");
  const int blocks = SumSquaresBlocks(N);
  GANTRY_LAUNCH(SumSquaresPartialKernel, blocks, 1024, 0, ctx.stream())(ctx.scratch(), g, N);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  GANTRY_LAUNCH(SumSquaresFinishKernel, 1, 32, 0, ctx.stream())(result, ctx.scratch(), blocks);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
