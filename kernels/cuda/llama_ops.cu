// RMSNorm, RoPE and the SwiGLU gate on the GPU, the twins of kernels/cpu/llama_ops.cc
// (kernels/llama_ops.h states each op).
#include "kernels/cuda/ns.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/llama_ops.h"

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

// One thread per (row, head of the NH + NKV rotated, i < hd/2).
template <typename E>
__global__ void RopeKernel(typename E::T* qkv, int64_t rows, int T, int heads, int row_width, int hd,
                           const float* inv_freq, bool inverse) {
  const int half = hd / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * heads * half) return;
  const int i = static_cast<int>(idx % half);
  const int h = static_cast<int>((idx / half) % heads);
  const int64_t row = idx / (static_cast<int64_t>(half) * heads);
  const float angle = static_cast<float>(row % T) * inv_freq[i];
  const float c = cosf(angle), s = inverse ? -sinf(angle) : sinf(angle);
  typename E::T* x = qkv + row * row_width + static_cast<int64_t>(h) * hd;
  const float a = E::Ld(x[i]), b = E::Ld(x[i + half]);
  x[i] = E::St(a * c - b * s);
  x[i + half] = E::St(b * c + a * s);
}

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

absl::Status RMSNormForward(Context& ctx, kernels::Ptr out, float* rstd, const float* inp, const float* weight, int N,
                            int C, float eps) {
  RETURN_IF_ERROR(CheckDims("RMSNormForward", {N, C}));
  return WithType(out.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(RMSNormForwardKernel<E>, CeilDiv(N, 8), 256, 0, ctx.stream())(Of<E>(out), rstd, inp, weight, N, C, eps);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status RMSNormBackward(Context& ctx, float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const float* rstd, int N, int C) {
  RETURN_IF_ERROR(CheckDims("RMSNormBackward", {N, C}));
  GANTRY_LAUNCH(RMSNormBackwardInputKernel, CeilDiv(N, 8), 256, 0, ctx.stream())(dinp, dout, inp, weight, rstd, N, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ColumnSums(ctx, dweight, nullptr, RMSNormParamGrads{dout, inp, rstd, C}, N, C);
}

absl::Status RopeApply(Context& ctx, kernels::Ptr qkv, int B, int T, int NH, int NKV, int hd, const float* inv_freq,
                       bool inverse) {
  RETURN_IF_ERROR(CheckDims("RopeApply", {B, T, NH, NKV, hd}));
  if (hd % 2 != 0) return absl::InvalidArgumentError(absl::StrCat("RopeApply: head_dim ", hd, " is odd"));
  const int64_t rows = static_cast<int64_t>(B) * T, n = rows * (NH + NKV) * (hd / 2);
  return WithType(qkv.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(RopeKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(qkv), rows, T, NH + NKV,
                                                                        (NH + 2 * NKV) * hd, hd, inv_freq, inverse);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status SwigluForward(Context& ctx, kernels::Ptr h, kernels::CPtr gu, int N, int F) {
  RETURN_IF_ERROR(CheckDims("SwigluForward", {N, F}));
  RETURN_IF_ERROR(CheckType("SwigluForward", h.type, {gu}));
  const int64_t n = static_cast<int64_t>(N) * F;
  return WithType(h.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(SwigluForwardKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(h), Of<E>(gu), n, F);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
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
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status GqaExpand(Context& ctx, kernels::Ptr out, kernels::CPtr qkv, int64_t rows, int NH, int NKV, int hd) {
  RETURN_IF_ERROR(kernels::CheckGroups("GqaExpand", NH, NKV, hd));
  RETURN_IF_ERROR(CheckType("GqaExpand", out.type, {qkv}));
  const int64_t n = rows * 3 * NH * hd;
  if (n <= 0) return absl::OkStatus();
  return WithType(out.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(GqaExpandKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(out), Of<E>(qkv), rows, NH, NKV, hd);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
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
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
