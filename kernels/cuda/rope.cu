// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// RoPE on the GPU, the twin of kernels/cpu/rope.cc (kernels/rope.h states the op).
#include "kernels/cuda/ns.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/rope.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

// One thread per (row, head of the NH + NKV rotated, i < hd/2). Row r of each sequence of T
// rows at position r, or positions[r] where given (RopeApplyAt).
template <typename E>
__global__ void RopeKernel(typename E::T* qkv, int64_t rows, int T, int heads, int row_width, int hd,
                           const float* inv_freq, bool inverse, const int32_t* positions) {
  const int half = hd / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * heads * half) return;
  const int i = static_cast<int>(idx % half);
  const int h = static_cast<int>((idx / half) % heads);
  const int64_t row = idx / (static_cast<int64_t>(half) * heads);
  const int t = static_cast<int>(row % T);
  const float angle = static_cast<float>(positions != nullptr ? positions[t] : t) * inv_freq[i];
  const float c = cosf(angle), s = inverse ? -sinf(angle) : sinf(angle);
  typename E::T* x = qkv + row * row_width + static_cast<int64_t>(h) * hd;
  const float a = E::Ld(x[i]), b = E::Ld(x[i + half]);
  x[i] = E::St(a * c - b * s);
  x[i + half] = E::St(b * c + a * s);
}

// The rotation's cos and sin for t < T, i < half: table[t * half + i] and table[T * half + t *
// half + i], from the angle t * inv_freq[i] in fp32 as RopeKernel takes it (the same bits).
__global__ void RopeTableKernel(float* table, int T, int half, const float* inv_freq) {
  const int idx = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= T * half) return;
  const float angle = static_cast<float>(idx / half) * inv_freq[idx % half];
  table[idx] = cosf(angle);
  table[T * half + idx] = sinf(angle);
}

// RopeKernel with the table's cos and sin, and 32-bit indices (n = rows * heads * half < 2^32).
template <typename E>
__global__ void RopeTabledKernel(typename E::T* qkv, uint32_t n, int T, int heads, int row_width, int hd,
                                 const float* table, bool inverse) {
  const uint32_t half = static_cast<uint32_t>(hd / 2);
  const uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const uint32_t i = idx % half, rest = idx / half;
  const uint32_t h = rest % static_cast<uint32_t>(heads), row = rest / static_cast<uint32_t>(heads);
  const uint32_t at = (row % static_cast<uint32_t>(T)) * half + i;
  const float c = table[at], sn = table[static_cast<uint32_t>(T) * half + at];
  const float s = inverse ? -sn : sn;
  typename E::T* x = qkv + static_cast<int64_t>(row) * row_width + static_cast<int64_t>(h) * hd;
  const float a = E::Ld(x[i]), b = E::Ld(x[i + half]);
  x[i] = E::St(a * c - b * s);
  x[i + half] = E::St(b * c + a * s);
}

}  // namespace

absl::Status RopeApplyAt(Context& ctx, kernels::Ptr qkv, int B, int L, const int32_t* positions, int NH, int NKV,
                         int hd, const float* inv_freq, bool inverse) {
  RETURN_IF_ERROR(CheckDims("RopeApplyAt", {B, L, NH, NKV, hd}));
  if (hd % 2 != 0) return absl::InvalidArgumentError(absl::StrCat("RopeApplyAt: head_dim ", hd, " is odd"));
  if (positions == nullptr) return absl::InvalidArgumentError("RopeApplyAt: no positions");
  const int64_t rows = static_cast<int64_t>(B) * L, n = rows * (NH + NKV) * (hd / 2);
  return WithType(qkv.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(RopeKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(qkv), rows, L, NH + NKV,
                                                                        (NH + 2 * NKV) * hd, hd, inv_freq, inverse,
                                                                        positions);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status RopeApply(Context& ctx, kernels::Ptr qkv, int B, int T, int NH, int NKV, int hd, const float* inv_freq,
                       bool inverse) {
  RETURN_IF_ERROR(CheckDims("RopeApply", {B, T, NH, NKV, hd}));
  if (hd % 2 != 0) return absl::InvalidArgumentError(absl::StrCat("RopeApply: head_dim ", hd, " is odd"));
  const int64_t rows = static_cast<int64_t>(B) * T, n = rows * (NH + NKV) * (hd / 2);
  return WithType(qkv.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    const int64_t table = static_cast<int64_t>(T) * hd;  // cos and sin of T * hd / 2 angles
    if (n < (int64_t{1} << 32) && table <= static_cast<int64_t>(Context::kScratchFloats)) {
      // The angles' cos and sin once (T * hd / 2 of them) rather than per head and row.
      GANTRY_LAUNCH(RopeTableKernel, CeilDiv(table / 2, 256), 256, 0, ctx.stream())(ctx.scratch(), T, hd / 2,
                                                                                     inv_freq);
      GPU_RETURN_IF_ERROR(cudaGetLastError());
      GANTRY_LAUNCH(RopeTabledKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(
          Of<E>(qkv), static_cast<uint32_t>(n), T, NH + NKV, (NH + 2 * NKV) * hd, hd, ctx.scratch(), inverse);
      GPU_RETURN_IF_ERROR(cudaGetLastError());
      return absl::OkStatus();
    }
    GANTRY_LAUNCH(RopeKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(qkv), rows, T, NH + NKV,
                                                                        (NH + 2 * NKV) * hd, hd, inv_freq, inverse,
                                                                        nullptr);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
