// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Grouped-query attention's expand and reduce on the GPU, the twins of kernels/cpu/gqa.cc
// (kernels/gqa.h states the ops).
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/gqa.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

// One thread per element of the expanded row (3 NH hd): a query element copied, or the
// key/value head h / group's element.
template <typename E>
__global__ void GqaExpandKernel(typename E::T* out, const typename E::T* qkv, int64_t rows, int NH, int NKV, int hd) {
  const int64_t w = static_cast<int64_t>(3) * NH * hd, idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * w) return;
  const int64_t r = idx / w;
  const int j = static_cast<int>(idx % w), part = j / (NH * hd), h = (j % (NH * hd)) / hd, d = j % hd;
  const int src_head = part == 0 ? h : NH + (part - 1) * NKV + h / (NH / NKV);
  out[idx] = qkv[r * (NH + 2 * NKV) * hd + static_cast<int64_t>(src_head) * hd + d];
}

// One thread per element of the gradient's row ((NH + 2 NKV) hd): a query element copied, or
// a key/value element summed over its group's heads in order, rounded once.
template <typename E>
__global__ void GqaReduceKernel(typename E::T* dqkv, const typename E::T* dqkv3, int64_t rows, int NH, int NKV, int hd) {
  const int64_t w = static_cast<int64_t>(NH + 2 * NKV) * hd, idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * w) return;
  const int64_t r = idx / w;
  const int j = static_cast<int>(idx % w), head = j / hd, d = j % hd;
  const typename E::T* src = dqkv3 + r * 3 * NH * hd;
  if (head < NH) {
    dqkv[idx] = src[j];
    return;
  }
  const int part = head < NH + NKV ? 1 : 2, k = head - NH - (part - 1) * NKV, group = NH / NKV;
  float s = 0.f;
  for (int h = k * group; h < (k + 1) * group; ++h) s += E::Ld(src[static_cast<int64_t>(part) * NH * hd + h * hd + d]);
  dqkv[idx] = E::St(s);
}

}  // namespace

absl::Status GqaExpand(Context& ctx, kernels::Ptr out, kernels::CPtr qkv, int64_t rows, int NH, int NKV, int hd) {
  RETURN_IF_ERROR(kernels::CheckGroups("GqaExpand", NH, NKV, hd));
  RETURN_IF_ERROR(CheckType("GqaExpand", out.type, {qkv}));
  const int64_t n = rows * 3 * NH * hd;
  if (n <= 0) return absl::OkStatus();
  return WithType(out.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(GqaExpandKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(out), Of<E>(qkv), rows, NH, NKV, hd);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status GqaReduce(Context& ctx, kernels::Ptr dqkv, kernels::CPtr dqkv3, int64_t rows, int NH, int NKV, int hd) {
  RETURN_IF_ERROR(kernels::CheckGroups("GqaReduce", NH, NKV, hd));
  RETURN_IF_ERROR(CheckType("GqaReduce", dqkv.type, {dqkv3}));
  const int64_t n = rows * (NH + 2 * NKV) * hd;
  if (n <= 0) return absl::OkStatus();
  return WithType(dqkv.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(GqaReduceKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(dqkv), Of<E>(dqkv3), rows, NH, NKV,
                                                                             hd);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
