// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Conversions between fp32 and the 16-bit types on the GPU, the twins of kernels/cpu/cast.cc.
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/round.cuh"

namespace gantry::GANTRY_CUDA_NS {
namespace {

// in (n) of EI's type → out (n) of EO's: widened exactly, then rounded to EO's type (ties to
// even; a NaN stays a quiet NaN), the twin of kernels/cpu/cast.cc's convert.
template <typename EO, typename EI>
__global__ void ConvertKernel(typename EO::T* out, const typename EI::T* in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = EO::St(EI::Ld(in[i]));
}

__global__ void RoundToKernel(float* out, const float* in, int bits, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = RoundBits(in[i], bits);
}

}  // namespace

absl::Status Convert(kernels::Ptr out, kernels::CPtr in, int64_t N, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckLength(N));
  if (out.type == in.type) {  // a copy (none in place)
    if (N > 0 && out.data != in.data) {
      GPU_RETURN_IF_ERROR(cudaMemcpyAsync(out.data, in.data, static_cast<size_t>(N) * kernels::ElemBytes(in.type),
                                           cudaMemcpyDeviceToDevice, stream));
    }
    return absl::OkStatus();
  }
  return WithType(out.type, [&](auto eo) {
    return WithType(in.type, [&](auto ei) {
      using EO = decltype(eo);
      using EI = decltype(ei);
      return Elementwise(ConvertKernel<EO, EI>, N, stream, Of<EO>(out), Of<EI>(in));
    });
  });
}

absl::Status RoundTo(float* out, const float* in, int64_t N, int bits, cudaStream_t stream) {
  if (bits != 16 && bits != 10) return absl::InvalidArgumentError("RoundTo: bits must be 16 (bf16) or 10 (fp16)");
  return Elementwise(RoundToKernel, N, stream, out, in, bits);
}

}  // namespace gantry::GANTRY_CUDA_NS
