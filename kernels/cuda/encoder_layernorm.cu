// Token + position embedding and LayerNorm on the GPU (fp32), the twins of
// kernels/cpu/encoder.cc and kernels/cpu/layernorm.cc.
#include "absl/strings/str_cat.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/column_sums.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/layernorm.h"

namespace gantry::cuda {
namespace {

__global__ void EncoderForwardKernel(float* out, const int32_t* inp, const float* wte, const float* wpe, int BT, int T,
                                     int C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(BT) * C) return;
  const int bt = static_cast<int>(i / C), c = static_cast<int>(i % C), t = bt % T;
  out[i] = wte[static_cast<int64_t>(inp[bt]) * C + c] + wpe[static_cast<int64_t>(t) * C + c];
}

// One thread per column of wte: the rows of dout added into the tokens' rows in (b, t)
// order, as on the CPU (no atomics, the same sums).
__global__ void EncoderBackwardWteKernel(float* dwte, const float* dout, const int32_t* inp, int BT, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int bt = 0; bt < BT; ++bt) dwte[static_cast<int64_t>(inp[bt]) * C + c] += dout[static_cast<int64_t>(bt) * C + c];
}

__global__ void EncoderBackwardWpeKernel(float* dwpe, const float* dout, int B, int T, int C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(T) * C) return;
  float s = 0.f;
  for (int b = 0; b < B; ++b) s += dout[static_cast<int64_t>(b) * T * C + i];
  dwpe[i] += s;
}

// One warp per row.
__global__ void LayerNormForwardKernel(float* out, float* mean, float* rstd, const float* inp, const float* w,
                                       const float* bias, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + static_cast<int64_t>(row) * C;
  float s = 0.f;
  for (int c = lane; c < C; c += 32) s += x[c];
  const float m = WarpSum(s) / C;
  float v = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float d = x[c] - m;
    v += d * d;
  }
  const float r = rsqrtf(WarpSum(v) / C + kernels::kLayerNormEps);
  float* o = out + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

__global__ void LayerNormBackwardInputKernel(float* dinp, const float* dout, const float* inp, const float* w,
                                             const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* dy = dout + static_cast<int64_t>(row) * C;
  const float* x = inp + static_cast<int64_t>(row) * C;
  const float m = mean[row], r = rstd[row];
  float sdn = 0.f, sdnx = 0.f;
  for (int c = lane; c < C; c += 32) {
    const float dn = w[c] * dy[c];
    sdn += dn;
    sdnx += dn * (x[c] - m) * r;
  }
  sdn = WarpSum(sdn) / C;
  sdnx = WarpSum(sdnx) / C;
  float* dx = dinp + static_cast<int64_t>(row) * C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * r;
    dx[c] += (w[c] * dy[c] - sdn - norm * sdnx) * r;
  }
}

// (dy * norm, dy) of one element: LayerNorm's dweight and dbias terms.
struct LayerNormParamGrads {
  const float *dout, *inp, *mean, *rstd;
  int C;
  __device__ float2 operator()(int r, int c) const {
    const int64_t i = static_cast<int64_t>(r) * C + c;
    return make_float2(dout[i] * (inp[i] - mean[r]) * rstd[r], dout[i]);
  }
};

absl::Status CheckDims(const char* op, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) {
    if (d <= 0 || d > (int64_t{1} << 31) - 1) return absl::InvalidArgumentError(absl::StrCat(op, ": bad dimension ", d));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status EncoderForward(Context& ctx, float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                            int T, int C) {
  if (auto s = CheckDims("EncoderForward", {B, T, C, int64_t{B} * T * C}); !s.ok()) return s;
  const int64_t n = static_cast<int64_t>(B) * T * C;
  EncoderForwardKernel<<<CeilDiv(n, 256), 256, 0, ctx.stream()>>>(out, inp, wte, wpe, B * T, T, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status EncoderBackward(Context& ctx, float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B,
                             int T, int C) {
  if (auto s = CheckDims("EncoderBackward", {B, T, C, int64_t{B} * T * C}); !s.ok()) return s;
  EncoderBackwardWteKernel<<<CeilDiv(C, 128), 128, 0, ctx.stream()>>>(dwte, dout, inp, B * T, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  EncoderBackwardWpeKernel<<<CeilDiv(int64_t{T} * C, 256), 256, 0, ctx.stream()>>>(dwpe, dout, B, T, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LayerNormForward(Context& ctx, float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C) {
  if (auto s = CheckDims("LayerNormForward", {N, C}); !s.ok()) return s;
  LayerNormForwardKernel<<<CeilDiv(N, 8), 256, 0, ctx.stream()>>>(out, mean, rstd, inp, weight, bias, N, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LayerNormBackward(Context& ctx, float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean, const float* rstd, int N,
                               int C) {
  if (auto s = CheckDims("LayerNormBackward", {N, C}); !s.ok()) return s;
  LayerNormBackwardInputKernel<<<CeilDiv(N, 8), 256, 0, ctx.stream()>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return ColumnSums(ctx, dweight, dbias, LayerNormParamGrads{dout, inp, mean, rstd, C}, N, C);
}

}  // namespace gantry::cuda
