// Token + position embedding and LayerNorm on the GPU (fp32; LayerNorm's output fp32 or
// 16-bit), the twins of kernels/cpu/encoder.cc and kernels/cpu/layernorm.cc.
#include "kernels/cuda/encoder_layernorm.cuh"
#include "kernels/cuda/ns.h"

#include <limits>

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
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status EncoderBackward(Context& ctx, float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B,
                             int T, int C) {
  return EncoderBackwardShard(ctx, dwte, dwpe, dout, inp, 0, std::numeric_limits<int>::max(), B, T, C);
}

absl::Status EncoderBackwardShard(Context& ctx, float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                                  int v_begin, int v_end, int B, int T, int C) {
  if (auto s = CheckDims("EncoderBackward", {B, T, C, int64_t{B} * T * C}); !s.ok()) return s;
  const dim3 wte_grid(CeilDiv(C, 128), kWteGroups);
  GANTRY_LAUNCH(EncoderBackwardWteKernel, wte_grid, 128, 0, ctx.stream())(dwte, dout, inp, v_begin, v_end, B * T, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (dwpe != nullptr) {
    GANTRY_LAUNCH(EncoderBackwardWpeKernel, CeilDiv(int64_t{T} * C, 256), 256, 0, ctx.stream())(dwpe, dout, B, T, C);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
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
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status LayerNormBackward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int N,
                               int C) {
  if (auto s = CheckDims("LayerNormBackward", {N, C}); !s.ok()) return s;
  GANTRY_LAUNCH(LayerNormBackwardInputKernel, CeilDiv(N, 8), 256, 0, ctx.stream())(dinp, dout, inp, weight, mean, rstd, N, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ColumnSums(ctx, dweight, dbias, LayerNormParamGrads{dout, inp, mean, rstd, C}, N, C);
}

}  // namespace gantry::GANTRY_CUDA_NS
