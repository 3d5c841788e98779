// Launchers of the fused causal attention (flash_attention.cuh holds the kernels and how
// they split the work).
#include "kernels/cuda/flash_attention.cuh"
#include "kernels/cuda/ns.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

using namespace flash;  // NOLINT: the kernels and their constants

absl::Status CheckFlash(const char* op, int B, int T, int C, int NH) {
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || C % NH != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": bad shape B ", B, " T ", T, " C ", C, " NH ", NH));
  }
  if (C / NH > kMaxHead) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": head size ", C / NH, " is over the fused kernel's ", kMaxHead));
  }
  return absl::OkStatus();
}

}  // namespace

size_t FlashAttentionBackwardScratch(int B, int T, int C, int NH) { return static_cast<size_t>(B) * NH * T; }

absl::Status FlashAttentionForward(Context& ctx, float* out, float* lse, const float* qkv, int B, int T, int C,
                                   int NH, int round_bits) {
  RETURN_IF_ERROR(CheckFlash("FlashAttentionForward", B, T, C, NH));
  const int hs = C / NH;
  const dim3 grid(CeilDiv(T, kWarps), static_cast<unsigned>(B * NH));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  GANTRY_LAUNCH(FlashForwardKernel, grid, kWarps * 32, ForwardSharedBytes(hs), ctx.stream())(out, lse, qkv, B, T, NH, hs, scale, round_bits);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status FlashAttentionBackward(Context& ctx, float* dqkv, float* scratch, const float* dout, const float* qkv,
                                    const float* out, const float* lse, int B, int T, int C, int NH) {
  RETURN_IF_ERROR(CheckFlash("FlashAttentionBackward", B, T, C, NH));
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* D = scratch;
  const unsigned row_blocks = CeilDiv(int64_t{B} * NH * T, kWarps);  // a warp per (b, h, i)
  GANTRY_LAUNCH(FlashRowDotKernel, row_blocks, kWarps * 32, 0, ctx.stream())(D, dout, out, B, T, NH, hs);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const dim3 grid(CeilDiv(T, kWarps), static_cast<unsigned>(B * NH));
  GANTRY_LAUNCH(FlashBackwardQKernel, grid, kWarps * 32, BackwardQSharedBytes(hs), ctx.stream())(dqkv, dout, qkv, lse, D, B,
                                                                                    T, NH, hs, scale);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  GANTRY_LAUNCH(FlashBackwardKVKernel, grid, kWarps * 32, BackwardKVSharedBytes(hs), ctx.stream())(dqkv, dout, qkv, lse, D, B,
                                                                                      T, NH, hs, scale);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
