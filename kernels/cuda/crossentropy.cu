// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The fused classifier (softmax + cross-entropy + its gradient; fp32 or 16-bit logits) on the
// GPU, the twin of kernels/cpu/crossentropy.cc.
#include "kernels/cuda/crossentropy.cuh"
#include "kernels/cuda/ns.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include <cstdint>

namespace gantry::GANTRY_CUDA_NS {
namespace {

absl::Status CheckRows(const char* op, int N, int V) {
  if (N <= 0 || V <= 0) return absl::InvalidArgumentError(absl::StrCat(op, ": bad shape (", N, ", ", V, ")"));
  return absl::OkStatus();
}

// The whole-row kernel for logits of E's type, with or without the gradient.
template <typename E, bool kGrad>
absl::Status LaunchCrossEntropy(Context& ctx, float* losses, typename E::T* logits, const int32_t* targets,
                                float dloss, int N, int V) {
  if (V % 8 == 0 && Aligned16({logits})) {  // rows of V 16-bit (or fp32) values, each 16-byte aligned
    auto* kernel = CrossEntropyVec8Kernel<E, kGrad>;
    GANTRY_LAUNCH(kernel, N, kRowThreads, 0, ctx.stream())(losses, logits, targets, dloss, V);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }
  auto* kernel = CrossEntropyKernel<E, kGrad>;
  GANTRY_LAUNCH(kernel, N, kRowThreads, 0, ctx.stream())(losses, logits, targets, dloss, V);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status CrossEntropyForward(Context& ctx, float* losses, kernels::CPtr logits, const int32_t* targets, int N,
                                 int V) {
  // logits (N,V), targets (N) → losses (N)
  RETURN_IF_ERROR(CheckRows("CrossEntropyForward", N, V));
  return WithType(logits.type, [&](auto e) {
    using E = decltype(e);
    // The forward-only kernel never writes the row.
    return LaunchCrossEntropy<E, false>(ctx, losses, const_cast<typename E::T*>(Of<E>(logits)), targets, 0.f, N, V);
  });
}

absl::Status CrossEntropyFusedForwardBackward(Context& ctx, float* losses, kernels::Ptr logits,
                                              const int32_t* targets, float dloss, int N, int V) {
  // logits (N,V), targets (N) → losses (N), logits := dlogits (N,V)
  RETURN_IF_ERROR(CheckRows("CrossEntropyFusedForwardBackward", N, V));
  return WithType(logits.type, [&](auto e) {
    using E = decltype(e);
    return LaunchCrossEntropy<E, true>(ctx, losses, Of<E>(logits), targets, dloss, N, V);
  });
}

absl::Status CrossEntropyShardStats(Context& ctx, float* stats, kernels::CPtr logits, const int32_t* targets, int N,
                                   int V, int v_begin) {
  // logits (N,V) of columns [v_begin, v_begin + V) → stats (N,3)
  RETURN_IF_ERROR(CheckRows("CrossEntropyShardStats", N, V));
  return WithType(logits.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(CrossEntropyShardStatsKernel<E>, N, kRowThreads, 0, ctx.stream())(stats, Of<E>(logits), targets, V,
                                                                                   v_begin);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status CrossEntropyShardFinish(Context& ctx, float* losses, kernels::Ptr logits, const float* all_stats,
                                    int ranks, const int32_t* targets, float dloss, int N, int V, int v_begin) {
  // all_stats (ranks,N,3) → losses (N), logits (N,V) := dlogits of these columns (dloss != 0)
  if (N <= 0 || V <= 0 || ranks <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("CrossEntropyShardFinish: bad shape (", N, ", ", V, ", ", ranks, " ranks)"));
  }
  return WithType(logits.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(CrossEntropyShardFinishKernel<E>, N, kRowThreads, 0, ctx.stream())(losses, Of<E>(logits), all_stats,
                                                                                    ranks, targets, dloss, N, V,
                                                                                    v_begin);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
