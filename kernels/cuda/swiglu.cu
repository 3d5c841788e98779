// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
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

// The same, 8 consecutive f a thread (16-byte accesses for 16-bit types): F % 8 == 0 and the
// pointers 16-byte aligned; n8 = N * F / 8.
template <typename E>
__global__ void SwigluForward8Kernel(typename E::T* h, const typename E::T* gu, int64_t n8, int F8) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  const int64_t row = i / F8, f = (i % F8) * 8, F = static_cast<int64_t>(F8) * 8;
  float x[8], u[8];
  Load8<E>(gu + row * 2 * F + f, x);
  Load8<E>(gu + row * 2 * F + F + f, u);
  for (int k = 0; k < 8; ++k) x[k] = x[k] * Sigmoid(x[k]) * u[k];
  Store8<E>(h + 8 * i, x);
}

template <typename E>
__global__ void SwigluBackward8Kernel(typename E::T* dgu, const typename E::T* dh, const typename E::T* gu, int64_t n8,
                                      int F8) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  const int64_t row = i / F8, f = (i % F8) * 8, F = static_cast<int64_t>(F8) * 8;
  float x[8], u[8], dy[8], dx[8];
  Load8<E>(gu + row * 2 * F + f, x);
  Load8<E>(gu + row * 2 * F + F + f, u);
  Load8<E>(dh + 8 * i, dy);
  for (int k = 0; k < 8; ++k) {
    const float sg = Sigmoid(x[k]);
    dx[k] = dy[k] * u[k] * sg * (1.0f + x[k] * (1.0f - sg));
    u[k] = dy[k] * x[k] * sg;  // d(up)
  }
  Store8<E>(dgu + row * 2 * F + f, dx);
  Store8<E>(dgu + row * 2 * F + F + f, u);
}

}  // namespace

absl::Status SwigluForward(Context& ctx, kernels::Ptr h, kernels::CPtr gu, int N, int F) {
  RETURN_IF_ERROR(CheckDims("SwigluForward", {N, F}));
  RETURN_IF_ERROR(CheckType("SwigluForward", h.type, {gu}));
  const int64_t n = static_cast<int64_t>(N) * F;
  return WithType(h.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    if (F % 8 == 0 && Aligned16({h.data, gu.data})) {
      GANTRY_LAUNCH(SwigluForward8Kernel<E>, CeilDiv(n / 8, 256), 256, 0, ctx.stream())(Of<E>(h), Of<E>(gu), n / 8,
                                                                                         F / 8);
      GPU_RETURN_IF_ERROR(cudaGetLastError());
      return absl::OkStatus();
    }
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
    if (F % 8 == 0 && Aligned16({dgu.data, dh.data, gu.data})) {
      GANTRY_LAUNCH(SwigluBackward8Kernel<E>, CeilDiv(n / 8, 256), 256, 0, ctx.stream())(
          Of<E>(dgu), Of<E>(dh), Of<E>(gu), n / 8, F / 8);
      GPU_RETURN_IF_ERROR(cudaGetLastError());
      return absl::OkStatus();
    }
    GANTRY_LAUNCH(SwigluBackwardKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(dgu), Of<E>(dh), Of<E>(gu),
                                                                                  n, F);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
