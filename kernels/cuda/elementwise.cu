#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elem.cuh"
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
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
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

absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t N, cudaStream_t stream) {
  if (N % 4 == 0 && (reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(a) |
                     reinterpret_cast<uintptr_t>(b)) % 16 == 0) {
    return Elementwise(ResidualForward4Kernel, N / 4, stream, out, a, b);
  }
  return Elementwise(ResidualForwardKernel, N, stream, out, a, b);
}

absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t N, cudaStream_t stream) {
  return Elementwise(ResidualBackwardKernel, N, stream, da, db, dout);
}

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

absl::Status ScaleInplace(Context& ctx, float* g, int64_t N, float s) {
  if (auto st = CheckLength(N); !st.ok()) return st;
  if (N == 0) return absl::OkStatus();
  GANTRY_LAUNCH(ScaleKernel, Blocks(N), kBlock, 0, ctx.stream())(g, N, s);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
