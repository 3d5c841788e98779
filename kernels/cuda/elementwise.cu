#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/ns.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

unsigned Blocks(int64_t n) { return static_cast<unsigned>((n + kBlock - 1) / kBlock); }

absl::Status CheckLength(int64_t n) {
  if (n < 0 || n > (int64_t{1} << 40)) return absl::InvalidArgumentError("bad element count");
  return absl::OkStatus();
}

// One thread per element: kernel(args..., n) over Blocks(n) blocks of kBlock.
template <typename... Params, typename... Args>
absl::Status Elementwise(void (*kernel)(Params...), int64_t n, cudaStream_t stream, Args... args) {
  if (auto s = CheckLength(n); !s.ok()) return s;
  if (n == 0) return absl::OkStatus();
  GANTRY_LAUNCH(kernel, Blocks(n), kBlock, 0, stream)(args..., n);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status GeluForward(float* out, const float* inp, int64_t N, cudaStream_t stream) {
  return Elementwise(GeluForwardKernel, N, stream, out, inp);
}

absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t N, cudaStream_t stream) {
  return Elementwise(GeluBackwardKernel, N, stream, dinp, inp, dout);
}

absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t N, cudaStream_t stream) {
  return Elementwise(ResidualForwardKernel, N, stream, out, a, b);
}

absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t N, cudaStream_t stream) {
  return Elementwise(ResidualBackwardKernel, N, stream, da, db, dout);
}

absl::Status CastToBf16(uint16_t* out, const float* in, int64_t N, cudaStream_t stream) {
  return Elementwise(CastToBf16Kernel, N, stream, out, in);
}

absl::Status CastFromBf16(float* out, const uint16_t* in, int64_t N, cudaStream_t stream) {
  return Elementwise(CastFromBf16Kernel, N, stream, out, in);
}

absl::Status RoundTo(float* out, const float* in, int64_t N, int bits, cudaStream_t stream) {
  if (bits != 16 && bits != 10) return absl::InvalidArgumentError("RoundTo: bits must be 16 (bf16) or 10 (fp16)");
  return Elementwise(RoundToKernel, N, stream, out, in, bits);
}

absl::Status ScaleInplace(Context& ctx, float* g, int64_t N, float s) {
  if (auto st = CheckLength(N); !st.ok()) return st;
  if (N == 0) return absl::OkStatus();
  GANTRY_LAUNCH(ScaleKernel, Blocks(N), kBlock, 0, ctx.stream())(g, N, s);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
