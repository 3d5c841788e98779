// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// GELU (tanh) on the GPU, forward and backward, the twins of kernels/cpu/gelu.cc: fp32 inside,
// the stored value rounded once (elem.cuh).
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/ops.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

// inp (n) → out (n), all of E's type (out may be inp).
template <typename E>
__global__ void GeluForwardKernel(typename E::T* out, const typename E::T* inp, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = E::St(Gelu(E::Ld(inp[i])));
}

// The same, 8 elements a thread (16-byte accesses for 16-bit types): n8 = n / 8, the pointers
// 16-byte aligned.
template <typename E>
__global__ void GeluForward8Kernel(typename E::T* out, const typename E::T* inp, int64_t n8) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  float v[8];
  Load8<E>(inp + 8 * i, v);
  for (int k = 0; k < 8; ++k) v[k] = Gelu(v[k]);
  Store8<E>(out + 8 * i, v);
}

// inp (n), dout (n) → dinp (n) = gelu'(inp) dout, all of E's type (dinp may be dout).
template <typename E>
__global__ void GeluBackwardKernel(typename E::T* dinp, const typename E::T* inp, const typename E::T* dout,
                                   int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] = E::St(GeluGrad(E::Ld(inp[i])) * E::Ld(dout[i]));
}

// The same, 8 elements a thread.
template <typename E>
__global__ void GeluBackward8Kernel(typename E::T* dinp, const typename E::T* inp, const typename E::T* dout,
                                    int64_t n8) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n8) return;
  float x[8], d[8];
  Load8<E>(inp + 8 * i, x);
  Load8<E>(dout + 8 * i, d);
  for (int k = 0; k < 8; ++k) d[k] = GeluGrad(x[k]) * d[k];
  Store8<E>(dinp + 8 * i, d);
}

}  // namespace

absl::Status GeluForward(kernels::Ptr out, kernels::CPtr inp, int64_t N, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckType("GeluForward", out.type, {inp}));
  return WithType(out.type, [&](auto e) {
    using E = decltype(e);
    if (N % 8 == 0 && Aligned16({out.data, inp.data})) {
      return Elementwise(GeluForward8Kernel<E>, N / 8, stream, Of<E>(out), Of<E>(inp));
    }
    return Elementwise(GeluForwardKernel<E>, N, stream, Of<E>(out), Of<E>(inp));
  });
}

absl::Status GeluBackward(kernels::Ptr dinp, kernels::CPtr inp, kernels::CPtr dout, int64_t N, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckType("GeluBackward", dinp.type, {inp, dout}));
  return WithType(dinp.type, [&](auto e) {
    using E = decltype(e);
    if (N % 8 == 0 && Aligned16({dinp.data, inp.data, dout.data})) {
      return Elementwise(GeluBackward8Kernel<E>, N / 8, stream, Of<E>(dinp), Of<E>(inp), Of<E>(dout));
    }
    return Elementwise(GeluBackwardKernel<E>, N, stream, Of<E>(dinp), Of<E>(inp), Of<E>(dout));
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
