// RMSNorm on the GPU, the twin of kernels/cpu/rmsnorm.cc (kernels/rmsnorm.h states the op).
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/rmsnorm.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

// One warp per row: out of E's type, the fp32 value x r w rounded once.
template <typename E>
__global__ void RMSNormForwardKernel(typename E::T* out, float* rstd, const float* inp, const float* w, int N, int C,
                                     float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + static_cast<int64_t>(row) * C;
  float ss = 0.f;
  for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
  const float r = rsqrtf(WarpSum(ss) / C + eps);
  typename E::T* o = out + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = E::St(x[c] * r * w[c]);
  if (lane == 0) rstd[row] = r;
}

// dx += r w dy - x r^3 mean(w dy x), one warp per row.
__global__ void RMSNormBackwardInputKernel(float* dinp, const float* dout, const float* inp, const float* w,
                                           const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* dy = dout + static_cast<int64_t>(row) * C;
  const float* x = inp + static_cast<int64_t>(row) * C;
  const float r = rstd[row];
  float dot = 0.f;
  for (int c = lane; c < C; c += 32) dot += w[c] * dy[c] * x[c];
  const float k = WarpSum(dot) / C * r * r * r;
  float* dx = dinp + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += 32) dx[c] += r * w[c] * dy[c] - k * x[c];
}

// (dy x r, 0) of one element: RMSNorm's dweight term.
struct RMSNormParamGrads {
  const float *dout, *inp, *rstd;
  int C;
  __device__ float2 operator()(int r, int c) const {
    const int64_t i = static_cast<int64_t>(r) * C + c;
    return make_float2(dout[i] * inp[i] * rstd[r], 0.f);
  }
};

}  // namespace

absl::Status RMSNormForward(Context& ctx, kernels::Ptr out, float* rstd, const float* inp, const float* weight, int N,
                            int C, float eps) {
  RETURN_IF_ERROR(CheckDims("RMSNormForward", {N, C}));
  return WithType(out.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(RMSNormForwardKernel<E>, CeilDiv(N, 8), 256, 0, ctx.stream())(Of<E>(out), rstd, inp, weight, N, C, eps);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status RMSNormBackward(Context& ctx, float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const float* rstd, int N, int C) {
  RETURN_IF_ERROR(CheckDims("RMSNormBackward", {N, C}));
  GANTRY_LAUNCH(RMSNormBackwardInputKernel, CeilDiv(N, 8), 256, 0, ctx.stream())(dinp, dout, inp, weight, rstd, N, C);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return ColumnSums(ctx, dweight, nullptr, RMSNormParamGrads{dout, inp, rstd, C}, N, C);
}

}  // namespace gantry::GANTRY_CUDA_NS
