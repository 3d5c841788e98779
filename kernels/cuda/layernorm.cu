// LayerNorm on the GPU, the twin of kernels/cpu/layernorm.cc.
#include "kernels/cuda/layernorm.cuh"
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/ops.h"
#include <algorithm>
#include <cstdint>

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

absl::Status LayerNormBackward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int N,
                               int C) {
  if (auto s = CheckDims("LayerNormBackward", {N, C}); !s.ok()) return s;
  // The one-pass kernel where C allows (a multiple of 4 up to 1024, every pointer of the rows
  // 16-byte aligned): at most 1024 blocks of rows (8 an SM of an H100), their partial sums in
  // the context's scratch.
  const bool aligned = (reinterpret_cast<uintptr_t>(dinp) | reinterpret_cast<uintptr_t>(dout) |
                        reinterpret_cast<uintptr_t>(inp) | reinterpret_cast<uintptr_t>(weight)) % 16 == 0;
  const int J = CeilDiv(C, 128);
  const int blocks = static_cast<int>(std::min<int64_t>(
      {1024, CeilDiv(N, kLnWarps), static_cast<int64_t>(Context::kScratchFloats) / 2 / C}));
  if (C % 4 == 0 && J <= 8 && aligned && blocks >= 1) {
    const int rows_per_block = CeilDiv(N, blocks), used = CeilDiv(N, rows_per_block);
    auto* partial = reinterpret_cast<float2*>(ctx.scratch());
    auto launch = [&](auto j) -> absl::Status {
      constexpr int kJ = decltype(j)::value;
      GANTRY_LAUNCH(LayerNormBackwardFusedKernel<kJ>, used, kLnWarps * 32, 0, ctx.stream())(
          dinp, partial, dout, inp, weight, mean, rstd, N, C, rows_per_block);
      GPU_RETURN_IF_ERROR(cudaGetLastError());
      GANTRY_LAUNCH(LayerNormParamsFinishKernel, CeilDiv(C, 32), dim3(32, 8), 0, ctx.stream())(dweight, dbias, partial,
                                                                                             used, C);
      GPU_RETURN_IF_ERROR(cudaGetLastError());
      return absl::OkStatus();
    };
    switch (J) {
      case 1: return launch(std::integral_constant<int, 1>{});
      case 2: return launch(std::integral_constant<int, 2>{});
      case 3: return launch(std::integral_constant<int, 3>{});
      case 4: return launch(std::integral_constant<int, 4>{});
      case 5: return launch(std::integral_constant<int, 5>{});
      case 6: return launch(std::integral_constant<int, 6>{});
      case 7: return launch(std::integral_constant<int, 7>{});
      default: return launch(std::integral_constant<int, 8>{});
    }
  }
  GANTRY_LAUNCH(LayerNormBackwardInputKernel, CeilDiv(N, 8), 256, 0, ctx.stream())(dinp, dout, inp, weight, mean, rstd, N, C);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return ColumnSums(ctx, dweight, dbias, LayerNormParamGrads{dout, inp, mean, rstd, C}, N, C);
}

}  // namespace gantry::GANTRY_CUDA_NS
