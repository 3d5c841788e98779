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

}  // namespace

absl::Status GeluForward(float* out, const float* inp, int64_t N, cudaStream_t stream) {
  if (auto s = CheckLength(N); !s.ok()) return s;
  if (N == 0) return absl::OkStatus();
  GANTRY_LAUNCH(GeluForwardKernel, Blocks(N), kBlock, 0, stream)(out, inp, N);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t N,
                          cudaStream_t stream) {
  if (auto s = CheckLength(N); !s.ok()) return s;
  if (N == 0) return absl::OkStatus();
  GANTRY_LAUNCH(GeluBackwardKernel, Blocks(N), kBlock, 0, stream)(dinp, inp, dout, N);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t N,
                             cudaStream_t stream) {
  if (auto s = CheckLength(N); !s.ok()) return s;
  if (N == 0) return absl::OkStatus();
  GANTRY_LAUNCH(ResidualForwardKernel, Blocks(N), kBlock, 0, stream)(out, a, b, N);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t N, cudaStream_t stream) {
  if (auto s = CheckLength(N); !s.ok()) return s;
  if (N == 0) return absl::OkStatus();
  GANTRY_LAUNCH(ResidualBackwardKernel, Blocks(N), kBlock, 0, stream)(da, db, dout, N);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status ScaleInplace(Context& ctx, float* g, int64_t N, float s) {
  if (auto st = CheckLength(N); !st.ok()) return st;
  if (N == 0) return absl::OkStatus();
  GANTRY_LAUNCH(ScaleKernel, Blocks(N), kBlock, 0, ctx.stream())(g, N, s);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
