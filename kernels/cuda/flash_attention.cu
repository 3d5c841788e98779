// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Launchers of the fused causal attention (flash_attention.cuh holds the kernels and how
// they split the work), for fp32 or 16-bit qkv, out, dout and dqkv (one type a call).
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
  // qkv (B,T,3C), heads of C / NH <= kMaxHead
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || C % NH != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": bad shape B ", B, " T ", T, " C ", C, " NH ", NH));
  }
  if (C / NH > kMaxHead) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": head size ", C / NH, " is over the fused kernel's ", kMaxHead));
  }
  return absl::OkStatus();
}

// A launch of `kernel` may take `bytes` of dynamic shared memory: past the 48 KB every
// launch gets, the kernel opts in, up to the device's limit (227 KB on an H100).
template <typename Kernel>
absl::Status AllowShared(const char* op, Kernel* kernel, size_t bytes) {
#if defined(GANTRY_CUDA_EMULATED)
  (void)op, (void)kernel, (void)bytes;  // the emulator's shared memory has no limit
#else
  if (bytes <= 48 * 1024) return absl::OkStatus();
  int device = 0, most = 0;
  GPU_RETURN_IF_ERROR(cudaGetDevice(&device));
  GPU_RETURN_IF_ERROR(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (bytes > static_cast<size_t>(most)) {
    return absl::FailedPreconditionError(absl::StrCat(op, ": the fused attention needs ", bytes,
                                                      " bytes of shared memory a block at this head size; device ",
                                                      device, " gives at most ", most));
  }
  GPU_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
#endif
  return absl::OkStatus();
}

}  // namespace

size_t FlashAttentionBackwardScratch(int B, int T, int C, int NH) { return static_cast<size_t>(B) * NH * T; }

absl::Status FlashAttentionForward(Context& ctx, kernels::Ptr out, float* lse, kernels::CPtr qkv, int B, int T, int C,
                                   int NH, int round_bits) {
  // qkv (B,T,3C) → out (B,T,C), lse (B,NH,T)
  RETURN_IF_ERROR(CheckFlash("FlashAttentionForward", B, T, C, NH));
  RETURN_IF_ERROR(CheckType("FlashAttentionForward", qkv.type, {out}));
  if (round_bits != 0 && round_bits != 16 && round_bits != 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("FlashAttentionForward: round_bits ", round_bits, " is none of 0, 10, 16"));
  }
  const int hs = C / NH;
  const dim3 grid(CeilDiv(T, kBlock), static_cast<unsigned>(B * NH));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  return WithType(qkv.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    return WithHead(hs, [&](auto head) -> absl::Status {
      constexpr int HSP = decltype(head)::value;
      constexpr size_t shared = ForwardSharedBytes<HSP>();
      const auto kernel = FlashForwardKernel<E, HSP>;
      RETURN_IF_ERROR(AllowShared("FlashAttentionForward", kernel, shared));
      GANTRY_LAUNCH(kernel, grid, kThreads, shared, ctx.stream())(
          Of<E>(out), lse, Of<E>(qkv), B, T, NH, hs, scale, round_bits);
      GPU_RETURN_IF_ERROR(cudaGetLastError());
      return absl::OkStatus();
    });
  });
}

absl::Status FlashAttentionBackward(Context& ctx, kernels::Ptr dqkv, float* scratch, kernels::CPtr dout,
                                    kernels::CPtr qkv, kernels::CPtr out, const float* lse, int B, int T, int C,
                                    int NH) {
  // dout (B,T,C), qkv (B,T,3C), out (B,T,C), lse (B,NH,T) → dqkv (B,T,3C)
  RETURN_IF_ERROR(CheckFlash("FlashAttentionBackward", B, T, C, NH));
  RETURN_IF_ERROR(CheckType("FlashAttentionBackward", dqkv.type, {dout, qkv, out}));
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* D = scratch;
  const unsigned row_blocks = CeilDiv(int64_t{B} * NH * T, kWarps);  // a warp per (b, h, i)
  const dim3 grid(CeilDiv(T, kBlock), static_cast<unsigned>(B * NH));
  return WithType(dqkv.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    return WithHead(hs, [&](auto head) -> absl::Status {
      constexpr int HSP = decltype(head)::value;
      constexpr size_t q_shared = BackwardQSharedBytes<HSP>(), kv_shared = BackwardKVSharedBytes<HSP>();
      const auto q_kernel = FlashBackwardQKernel<E, HSP>;
      const auto kv_kernel = FlashBackwardKVKernel<E, HSP>;
      RETURN_IF_ERROR(AllowShared("FlashAttentionBackward", q_kernel, q_shared));
      RETURN_IF_ERROR(AllowShared("FlashAttentionBackward", kv_kernel, kv_shared));
      GANTRY_LAUNCH(FlashRowDotKernel<E>, row_blocks, kWarps * 32, 0, ctx.stream())(D, Of<E>(dout), Of<E>(out), B,
                                                                                    T, NH, hs);
      GPU_RETURN_IF_ERROR(cudaGetLastError());
      GANTRY_LAUNCH(q_kernel, grid, kThreads, q_shared, ctx.stream())(
          Of<E>(dqkv), Of<E>(dout), Of<E>(qkv), lse, D, B, T, NH, hs, scale);
      GPU_RETURN_IF_ERROR(cudaGetLastError());
      GANTRY_LAUNCH(kv_kernel, grid, kThreads, kv_shared, ctx.stream())(
          Of<E>(dqkv), Of<E>(dout), Of<E>(qkv), lse, D, B, T, NH, hs, scale);
      GPU_RETURN_IF_ERROR(cudaGetLastError());
      return absl::OkStatus();
    });
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
