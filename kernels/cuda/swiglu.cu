// SwiGLU's gate on the GPU, the twin of kernels/cpu/swiglu.cc (kernels/swiglu.h states the op).
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/swiglu.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

__device__ inline float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename E>
__global__ void SwigluForwardKernel(typename E::T* h, const typename E::T* gu, int64_t n, int F) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t row = i / F, f = i % F;
  const float x = E::Ld(gu[row * 2 * F + f]), u = E::Ld(gu[row * 2 * F + F + f]);
  h[i] = E::St(x * Sigmoid(x) * u);
}

template <typename E>
__global__ void SwigluBackwardKernel(typename E::T* dgu, const typename E::T* dh, const typename E::T* gu, int64_t n,
                                     int F) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t row = i / F, f = i % F;
  const float x = E::Ld(gu[row * 2 * F + f]), u = E::Ld(gu[row * 2 * F + F + f]), dy = E::Ld(dh[i]);
  const float sg = Sigmoid(x);
  dgu[row * 2 * F + f] = E::St(dy * u * sg * (1.0f + x * (1.0f - sg)));
  dgu[row * 2 * F + F + f] = E::St(dy * x * sg);
}

}  // namespace

absl::Status SwigluForward(Context& ctx, kernels::Ptr h, kernels::CPtr gu, int N, int F) {
  RETURN_IF_ERROR(CheckDims("SwigluForward", {N, F}));
  RETURN_IF_ERROR(CheckType("SwigluForward", h.type, {gu}));
  const int64_t n = static_cast<int64_t>(N) * F;
  return WithType(h.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(SwigluForwardKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(h), Of<E>(gu), n, F);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status SwigluBackward(Context& ctx, kernels::Ptr dgu, kernels::CPtr dh, kernels::CPtr gu, int N, int F) {
  RETURN_IF_ERROR(CheckDims("SwigluBackward", {N, F}));
  RETURN_IF_ERROR(CheckType("SwigluBackward", dgu.type, {dh, gu}));
  const int64_t n = static_cast<int64_t>(N) * F;
  return WithType(dgu.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(SwigluBackwardKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(dgu), Of<E>(dh), Of<E>(gu),
                                                                                  n, F);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
