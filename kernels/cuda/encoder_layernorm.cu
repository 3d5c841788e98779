// Token + position embedding and LayerNorm on the GPU (fp32; LayerNorm's output fp32 or
// 16-bit), the twins of kernels/cpu/encoder.cc and kernels/cpu/layernorm.cc.
#include "kernels/cuda/encoder_layernorm.cuh"
#include "kernels/cuda/ns.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/ops.h"

namespace gantry::GANTRY_CUDA_NS {

absl::Status EncoderForward(Context& ctx, float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                            int T, int C) {
  return EncoderForwardShard(ctx, out, inp, wte, 0, std::numeric_limits<int>::max(), wpe, B, T, C);
}

absl::Status EncoderForwardShard(Context& ctx, float* out, const int32_t* inp, const float* wte, int v_begin,
                                 int v_end, const float* wpe, int B, int T, int C) {
  if (auto s = CheckDims("EncoderForward", {B, T, C, int64_t{B} * T * C}); !s.ok()) return s;
  const int64_t n = static_cast<int64_t>(B) * T * C;
  GANTRY_LAUNCH(EncoderForwardKernel, CeilDiv(n, 256), 256, 0, ctx.stream())(out, inp, wte, v_begin, v_end, wpe,
                                                                             B * T, T, C);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status EncoderBackward(Context& ctx, float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B,
                             int T, int C) {
  return EncoderBackwardShard(ctx, dwte, dwpe, dout, inp, 0, std::numeric_limits<int>::max(), B, T, C);
}

absl::Status EncoderBackwardShard(Context& ctx, float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                                  int v_begin, int v_end, int B, int T, int C) {
  if (auto s = CheckDims("EncoderBackward", {B, T, C, int64_t{B} * T * C}); !s.ok()) return s;
  const int groups = WteGroups(B * T);
  const dim3 wte_grid(CeilDiv(C, 128), groups);
  GANTRY_LAUNCH(EncoderBackwardWteKernel, wte_grid, 128, 0, ctx.stream())(dwte, dout, inp, v_begin, v_end, B * T, C,
                                                                         groups);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  if (dwpe != nullptr) {
    GANTRY_LAUNCH(EncoderBackwardWpeKernel, CeilDiv(int64_t{T} * C, 256), 256, 0, ctx.stream())(dwpe, dout, B, T, C);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
  }
  return absl::OkStatus();
}

absl::Status LayerNormForward(Context& ctx, kernels::Ptr out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C) {
  // inp (N,C) → out (N,C) of out's type, mean (N), rstd (N)
  if (auto s = CheckDims("LayerNormForward", {N, C}); !s.ok()) return s;
  return WithType(out.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(LayerNormForwardKernel<E>, CeilDiv(N, 8), 256, 0, ctx.stream())(Of<E>(out), mean, rstd, inp, weight,
                                                                                  bias, N, C);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
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
