// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// LayerNorm on the GPU, the twin of kernels/cpu/layernorm.cc.
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/norm_backward.cuh"
#include "kernels/cuda/ops.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

// LayerNormForwardKernel over N rows, with add or without (null: sum unused).
absl::Status LaunchLayerNormForward(Context& ctx, const char* op, kernels::Ptr out, float* mean, float* rstd,
                                    float* sum, const float* inp, const float* add, const float* weight,
                                    const float* bias, int N, int C) {
  if (auto s = CheckDims(op, {N, C}); !s.ok()) return s;
  const bool vec = C % kRowSpan == 0 && Aligned16({out.data, sum, inp, add, weight, bias});
  return WithType(out.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(LayerNormForwardKernel<E>, CeilDiv(N, 8), 256, 0, ctx.stream())(Of<E>(out), mean, rstd, sum, inp,
                                                                                  add, weight, bias, N, C, vec);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

}  // namespace

absl::Status LayerNormForward(Context& ctx, kernels::Ptr out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C) {
  // inp (N,C) → out (N,C) of out's type, mean (N), rstd (N)
  return LaunchLayerNormForward(ctx, "LayerNormForward", out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C);
}

absl::Status ResidualLayerNormForward(Context& ctx, float* residual, kernels::Ptr out, float* mean, float* rstd,
                                      const float* a, const float* b, const float* weight, const float* bias, int N,
                                      int C) {
  // a (N,C), b (N,C) → residual (N,C), out (N,C) of out's type, mean (N), rstd (N)
  return LaunchLayerNormForward(ctx, "ResidualLayerNormForward", out, mean, rstd, residual, a, b, weight, bias, N, C);
}

absl::Status LayerNormBackward(Context& ctx, float* dinp, float* dweight, float* dbias, kernels::CPtr dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int N,
                               int C, kernels::Ptr dinp16) {
  if (auto s = CheckDims("LayerNormBackward", {N, C}); !s.ok()) return s;
  RETURN_IF_ERROR(CheckNormBackwardTypes("LayerNormBackward", dout, dinp16));
  return WithType(dout.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    typename E::T* d16 = dinp16 ? Of<E>(dinp16) : nullptr;
    // One pass where C allows (up to 1024: norm_backward.cuh), the two otherwise.
    const LayerNormBackwardRows rows{mean, rstd};
    if (const int blocks = NormBackwardFusedBlocks<LayerNormBackwardRows>(N, C); blocks > 0) {
      return LaunchNormBackwardFused<LayerNormBackwardRows, E>(ctx, blocks, dinp, dweight, dbias, rows, Of<E>(dout),
                                                               inp, weight, N, C, d16);
    }
    GANTRY_LAUNCH(LayerNormBackwardInputKernel<E>, CeilDiv(N, 8), 256, 0, ctx.stream())(dinp, Of<E>(dout), inp, weight,
                                                                                       mean, rstd, N, C, d16);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return ColumnSums(ctx, dweight, dbias, LayerNormParamGrads<E>{Of<E>(dout), inp, mean, rstd, C}, N, C);
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
