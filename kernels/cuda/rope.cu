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

// One thread per (row, head of the NH + NKV rotated, i < hd/2).
template <typename E>
__global__ void RopeKernel(typename E::T* qkv, int64_t rows, int T, int heads, int row_width, int hd,
                           const float* inv_freq, bool inverse) {
  const int half = hd / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * heads * half) return;
  const int i = static_cast<int>(idx % half);
  const int h = static_cast<int>((idx / half) % heads);
  const int64_t row = idx / (static_cast<int64_t>(half) * heads);
  const float angle = static_cast<float>(row % T) * inv_freq[i];
  const float c = cosf(angle), s = inverse ? -sinf(angle) : sinf(angle);
  typename E::T* x = qkv + row * row_width + static_cast<int64_t>(h) * hd;
  const float a = E::Ld(x[i]), b = E::Ld(x[i + half]);
  x[i] = E::St(a * c - b * s);
  x[i + half] = E::St(b * c + a * s);
}

}  // namespace

absl::Status RopeApply(Context& ctx, kernels::Ptr qkv, int B, int T, int NH, int NKV, int hd, const float* inv_freq,
                       bool inverse) {
  RETURN_IF_ERROR(CheckDims("RopeApply", {B, T, NH, NKV, hd}));
  if (hd % 2 != 0) return absl::InvalidArgumentError(absl::StrCat("RopeApply: head_dim ", hd, " is odd"));
  const int64_t rows = static_cast<int64_t>(B) * T, n = rows * (NH + NKV) * (hd / 2);
  return WithType(qkv.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(RopeKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(qkv), rows, T, NH + NKV,
                                                                        (NH + 2 * NKV) * hd, hd, inv_freq, inverse);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
