// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// RMSNorm on the GPU, the twin of kernels/cpu/rmsnorm.cc (kernels/rmsnorm.h states the op).
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/norm_backward.cuh"
#include "kernels/cuda/norm_rows.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/rmsnorm.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

// One warp per row (norm_rows.cuh's walk: 16-byte loads and stores where vec): out of E's
// type, the fp32 value x r w rounded once. With add, x = inp + add, written to sum and normalised
// from there, by the same code (the bits of ResidualForward then RMSNormForward).
template <typename E>
__global__ void RMSNormForwardKernel(typename E::T* out, float* rstd, float* sum, const float* inp, const float* add,
                                     const float* w, int N, int C, float eps, bool vec) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const int64_t off = static_cast<int64_t>(row) * C;
  const int c0 = kRowSpan * lane, step = 32 * kRowSpan;
  float ss = 0.f;
  for (int c = c0; c < C; c += step) {
    float u[8];
    LoadRowAdd8(u, inp, add, sum, off, c, C, vec);
    for (int k = 0; k < kRowSpan && c + k < C; ++k) ss += u[k] * u[k];
  }
  const float r = rsqrtf(WarpSum(ss) / C + eps);
  const float* x = (add != nullptr ? sum : inp) + off;
  typename E::T* o = out + off;
  for (int c = c0; c < C; c += step) {
    float u[8], wv[8];
    LoadRow8(x, c, C, vec, u);
    LoadRow8(w, c, C, vec, wv);
    for (int k = 0; k < kRowSpan; ++k) u[k] = u[k] * r * wv[k];
    StoreRow8<E>(o, c, C, vec, u);
  }
  if (lane == 0) rstd[row] = r;
}

// dx += r w dy - x r^3 mean(w dy x), one warp per row (the two-pass backward, C over 1024).
// dout of E's type (read exactly); dinp16 (16-bit E only; null: none) = dinp's new values rounded.
template <typename E>
__global__ void RMSNormBackwardInputKernel(float* dinp, const typename E::T* dout, const float* inp, const float* w,
                                           const float* rstd, int N, int C, typename E::T* dinp16) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const typename E::T* dy = dout + static_cast<int64_t>(row) * C;
  const float* x = inp + static_cast<int64_t>(row) * C;
  const float r = rstd[row];
  float dot = 0.f;
  for (int c = lane; c < C; c += 32) dot += w[c] * E::Ld(dy[c]) * x[c];
  const float k = WarpSum(dot) / C * r * r * r;
  float* dx = dinp + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += 32) {
    dx[c] += r * w[c] * E::Ld(dy[c]) - k * x[c];
    if (dinp16 != nullptr) dinp16[static_cast<int64_t>(row) * C + c] = E::St(dx[c]);
  }
}

// (dy x r, 0) of one element: RMSNorm's dweight term (dy of E's type).
template <typename E>
struct RMSNormParamGrads {
  const typename E::T* dout;
  const float *inp, *rstd;
  int C;
  __device__ float2 operator()(int r, int c) const {
    const int64_t i = static_cast<int64_t>(r) * C + c;
    return make_float2(E::Ld(dout[i]) * inp[i] * rstd[r], 0.f);
  }
};

// RMSNorm's rows for the one-pass backward (norm_backward.cuh): the parameter gradient dweight
// (x r dy), the row's sum of w dy x, then k = mean(w dy x) r^3 and dx = r w dy - k x (the cpu
// twin's order of operations).
struct RMSNormBackwardRows {
  static constexpr int kParams = 1;
  const float* rstd;
  struct Row {
    float r, k;
  };
  __device__ Row Start(int row) const { return {rstd[row], 0.f}; }
  __device__ void Add(Row& s, float w, float dy, float x, float (&p)[kParams]) const {
    s.k += w * dy * x;
    p[0] += x * s.r * dy;
  }
  __device__ void Reduce(Row& s, int C) const { s.k = WarpSum(s.k) / C * s.r * s.r * s.r; }
  __device__ float Dx(const Row& s, float w, float dy, float x) const { return s.r * w * dy - s.k * x; }
};

}  // namespace

namespace {

// RMSNormForwardKernel over N rows, with add or without (null: sum unused).
absl::Status LaunchRMSNormForward(Context& ctx, const char* op, kernels::Ptr out, float* rstd, float* sum,
                                  const float* inp, const float* add, const float* weight, int N, int C, float eps) {
  RETURN_IF_ERROR(CheckDims(op, {N, C}));
  const bool vec = C % kRowSpan == 0 && Aligned16({out.data, sum, inp, add, weight});
  return WithType(out.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(RMSNormForwardKernel<E>, CeilDiv(N, 8), 256, 0, ctx.stream())(Of<E>(out), rstd, sum, inp, add,
                                                                                weight, N, C, eps, vec);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

}  // namespace

absl::Status RMSNormForward(Context& ctx, kernels::Ptr out, float* rstd, const float* inp, const float* weight, int N,
                            int C, float eps) {
  return LaunchRMSNormForward(ctx, "RMSNormForward", out, rstd, nullptr, inp, nullptr, weight, N, C, eps);
}

absl::Status ResidualRMSNormForward(Context& ctx, float* residual, kernels::Ptr out, float* rstd, const float* a,
                                    const float* b, const float* weight, int N, int C, float eps) {
  return LaunchRMSNormForward(ctx, "ResidualRMSNormForward", out, rstd, residual, a, b, weight, N, C, eps);
}

absl::Status RMSNormBackward(Context& ctx, float* dinp, float* dweight, kernels::CPtr dout, const float* inp,
                             const float* weight, const float* rstd, int N, int C, kernels::Ptr dinp16) {
  RETURN_IF_ERROR(CheckDims("RMSNormBackward", {N, C}));
  RETURN_IF_ERROR(CheckNormBackwardTypes("RMSNormBackward", dout, dinp16));
  return WithType(dout.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    typename E::T* d16 = dinp16 ? Of<E>(dinp16) : nullptr;
    // One pass where C allows (up to 1024: norm_backward.cuh), the two otherwise.
    const RMSNormBackwardRows rows{rstd};
    if (const int blocks = NormBackwardFusedBlocks<RMSNormBackwardRows>(N, C); blocks > 0) {
      return LaunchNormBackwardFused<RMSNormBackwardRows, E>(ctx, blocks, dinp, dweight, nullptr, rows, Of<E>(dout),
                                                             inp, weight, N, C, d16);
    }
    GANTRY_LAUNCH(RMSNormBackwardInputKernel<E>, CeilDiv(N, 8), 256, 0, ctx.stream())(dinp, Of<E>(dout), inp, weight,
                                                                                     rstd, N, C, d16);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return ColumnSums(ctx, dweight, nullptr, RMSNormParamGrads<E>{Of<E>(dout), inp, rstd, C}, N, C);
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
