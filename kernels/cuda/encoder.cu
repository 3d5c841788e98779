// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The token + position embedding on the GPU, the twin of kernels/cpu/encoder.cc.
#include "kernels/cuda/encoder.cuh"
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"
#include <cstdint>
#include <limits>

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

}  // namespace gantry::GANTRY_CUDA_NS
