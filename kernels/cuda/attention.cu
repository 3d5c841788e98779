// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Causal self-attention through cuBLAS strided-batched GEMMs (fp32), the twin of
// kernels/cpu/attention.cc: q, k, v are permuted to (B, NH, T, hs), the scores and
// probabilities are (B, NH, T, T) and kept for the backward pass. The fused kernels
// (flash_attention.cu) are the fast path; this one is the exact reference on the GPU. 16-bit
// qkv, out, dout and dqkv (one type) are widened into the fp32 scratch as they are permuted and
// rounded as they are permuted back, as the CPU twin widens and rounds each head: the GEMMs and
// the probabilities stay fp32.
#include <cmath>
#include "kernels/cuda/round.cuh"
#include "kernels/cuda/ns.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"

namespace gantry::GANTRY_CUDA_NS {
namespace {

// Element i of a head-major (B, NH, T, hs) tensor, in a (B, T, ...) tensor whose rows are
// `stride` wide with head h at channels [h*hs, (h+1)*hs): the row-major offset.
__device__ inline int64_t TokenMajor(int64_t i, int T, int NH, int hs, int64_t stride) {
  const int64_t d = i % hs, t = (i / hs) % T, h = (i / hs / T) % NH, b = i / hs / T / NH;
  return (b * T + t) * stride + h * hs + d;
}

// qkv (B, T, 3, NH, hs) of E's type → q, k, v each (B, NH, T, hs) fp32.
template <typename E>
__global__ void SplitHeadsKernel(float* q, float* k, float* v, const typename E::T* qkv, int B, int T, int NH,
                                 int hs) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(B) * NH * T * hs) return;
  const int64_t C = static_cast<int64_t>(NH) * hs, src = TokenMajor(i, T, NH, hs, 3 * C);
  q[i] = E::Ld(qkv[src]);
  k[i] = E::Ld(qkv[src + C]);
  v[i] = E::Ld(qkv[src + 2 * C]);
}

// x (B, NH, T, hs) fp32 → out (B, T, NH·hs) of E's type, at channel offset `part`·C of rows
// `stride` wide.
template <typename E>
__global__ void MergeHeadsKernel(typename E::T* out, const float* x, int B, int T, int NH, int hs, int stride,
                                 int part) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(B) * NH * T * hs) return;
  out[TokenMajor(i, T, NH, hs, stride) + static_cast<int64_t>(part) * NH * hs] = E::St(x[i]);
}

// dout (B, T, C) of E's type → d (B, NH, T, hs) fp32
template <typename E>
__global__ void SplitGradKernel(float* d, const typename E::T* dout, int B, int T, int NH, int hs) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(B) * NH * T * hs) return;
  d[i] = E::Ld(dout[TokenMajor(i, T, NH, hs, static_cast<int64_t>(NH) * hs)]);
}

// One warp per row i of a (T, T) score matrix: softmax over j <= i, zero above.
// round_bits: each exp(s - m) rounded to that type (kernels/cuda/round.cuh) before it is
// normalised by the unrounded sum (mixed precision: flash attention's rounding of the weights).
__global__ void CausalSoftmaxKernel(float* att, int rows, int T, int round_bits) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int i = static_cast<int>(row % T);
  float* a = att + row * T;
  float mx = -INFINITY;
  for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, a[j]);
  mx = WarpMax(mx);
  float s = 0.f;
  for (int j = lane; j <= i; j += 32) s += expf(a[j] - mx);
  const float inv = 1.f / WarpSum(s);
  for (int j = lane; j < T; j += 32) a[j] = j <= i ? RoundBits(expf(a[j] - mx), round_bits) * inv : 0.f;
}

// In place on datt: dpre[i, j] = scale * att[i, j] * (datt[i, j] - sum_k att[i, k] datt[i, k]).
__global__ void CausalSoftmaxBackwardKernel(float* datt, const float* att, int rows, int T, float scale) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int i = static_cast<int>(row % T);
  float* d = datt + row * T;
  const float* a = att + row * T;
  float s = 0.f;
  for (int j = lane; j <= i; j += 32) s += a[j] * d[j];
  s = WarpSum(s);
  for (int j = lane; j < T; j += 32) d[j] = j <= i ? scale * a[j] * (d[j] - s) : 0.f;
}

// Row-major batched products over B·NH (T, hs) and (T, T) matrices, in cuBLAS's
// column-major terms (a row-major (r, c) matrix is a column-major (c, r) one).
struct Batched {
  Context& ctx;
  int batches, T, hs;
  // S (T, T) = alpha · X (T, hs) @ Y (T, hs)^T
  absl::Status ScoresXYt(float* S, const float* X, const float* Y, float alpha) const {
    const float beta = 0.f;
    GPU_RETURN_IF_ERROR(cublasSgemmStridedBatched(ctx.blas(), CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &alpha, Y, hs,
                                                     int64_t{T} * hs, X, hs, int64_t{T} * hs, &beta, S, T,
                                                     int64_t{T} * T, batches));
    return absl::OkStatus();
  }
  // O (T, hs) = P (T, T) @ V (T, hs)
  absl::Status PV(float* O, const float* P, const float* V) const {
    const float alpha = 1.f, beta = 0.f;
    GPU_RETURN_IF_ERROR(cublasSgemmStridedBatched(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &alpha, V, hs,
                                                     int64_t{T} * hs, P, T, int64_t{T} * T, &beta, O, hs,
                                                     int64_t{T} * hs, batches));
    return absl::OkStatus();
  }
  // O (T, hs) = P (T, T)^T @ D (T, hs)
  absl::Status PtD(float* O, const float* P, const float* D) const {
    const float alpha = 1.f, beta = 0.f;
    GPU_RETURN_IF_ERROR(cublasSgemmStridedBatched(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &alpha, D, hs,
                                                     int64_t{T} * hs, P, T, int64_t{T} * T, &beta, O, hs,
                                                     int64_t{T} * hs, batches));
    return absl::OkStatus();
  }
};

absl::Status CheckAttention(const char* op, int B, int T, int C, int NH) {
  if (B <= 0 || T <= 0 || C <= 0 || NH <= 0 || C % NH != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": bad shape B ", B, " T ", T, " C ", C, " NH ", NH));
  }
  return absl::OkStatus();
}

// The forward of E's qkv and out: the heads widened into the fp32 scratch, fp32 GEMMs and
// softmax, the output rounded as it is merged.
template <typename E>
absl::Status AttentionForwardOf(Context& ctx, typename E::T* out, float* att, float* scratch,
                                const typename E::T* qkv, int B, int T, int C, int NH, int round_bits) {
  const int hs = C / NH;
  const int64_t n = static_cast<int64_t>(B) * T * C;
  float *q = scratch, *k = q + n, *v = k + n, *o = v + n;
  GANTRY_LAUNCH(SplitHeadsKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(q, k, v, qkv, B, T, NH, hs);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  const Batched g{ctx, B * NH, T, hs};
  if (auto s = g.ScoresXYt(att, q, k, 1.0f / std::sqrt(static_cast<float>(hs))); !s.ok()) return s;
  const int rows = B * NH * T;
  GANTRY_LAUNCH(CausalSoftmaxKernel, CeilDiv(rows, 8), 256, 0, ctx.stream())(att, rows, T, round_bits);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  if (auto s = g.PV(o, att, v); !s.ok()) return s;
  GANTRY_LAUNCH(MergeHeadsKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(out, o, B, T, NH, hs, C, 0);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// Its backward: q, k, v and dout widened, dq, dk, dv rounded as they are merged into dqkv.
template <typename E>
absl::Status AttentionBackwardOf(Context& ctx, typename E::T* dqkv, float* scratch, const typename E::T* dout,
                                 const typename E::T* qkv, const float* att, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int64_t n = static_cast<int64_t>(B) * T * C;
  float *q = scratch, *k = q + n, *v = k + n, *d = v + n, *dq = d + n, *dk = dq + n, *dv = dk + n, *datt = dv + n;
  GANTRY_LAUNCH(SplitHeadsKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(q, k, v, qkv, B, T, NH, hs);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  GANTRY_LAUNCH(SplitGradKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(d, dout, B, T, NH, hs);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  const Batched g{ctx, B * NH, T, hs};
  if (auto s = g.ScoresXYt(datt, d, v, 1.f); !s.ok()) return s;  // datt = dO @ V^T
  if (auto s = g.PtD(dv, att, d); !s.ok()) return s;             // dV = P^T @ dO
  const int rows = B * NH * T;
  GANTRY_LAUNCH(CausalSoftmaxBackwardKernel, CeilDiv(rows, 8), 256, 0, ctx.stream())(datt, att, rows, T,
                                                                        1.0f / std::sqrt(static_cast<float>(hs)));
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  if (auto s = g.PV(dq, datt, k); !s.ok()) return s;   // dQ = dS @ K
  if (auto s = g.PtD(dk, datt, q); !s.ok()) return s;  // dK = dS^T @ Q
  for (auto [x, part] : {std::pair{dq, 0}, std::pair{dk, 1}, std::pair{dv, 2}}) {
    GANTRY_LAUNCH(MergeHeadsKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(dqkv, x, B, T, NH, hs, 3 * C, part);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
  }
  return absl::OkStatus();
}

}  // namespace

size_t AttentionForwardScratch(int B, int T, int C, int NH) { return size_t{4} * B * T * C; }
size_t AttentionBackwardScratch(int B, int T, int C, int NH) {
  return size_t{7} * B * T * C + static_cast<size_t>(B) * NH * T * T;
}

absl::Status AttentionForward(Context& ctx, kernels::Ptr out, float* att, float* scratch, kernels::CPtr qkv, int B,
                              int T, int C, int NH, int round_bits) {
  // qkv (B,T,3C) → out (B,T,C), att (B,NH,T,T)
  if (auto s = CheckAttention("AttentionForward", B, T, C, NH); !s.ok()) return s;
  RETURN_IF_ERROR(CheckType("AttentionForward", qkv.type, {out}));
  if (round_bits != 0 && round_bits != 16 && round_bits != 10) {
    return absl::InvalidArgumentError(absl::StrCat("AttentionForward: round_bits ", round_bits, " is none of 0, 10, 16"));
  }
  return WithType(qkv.type, [&](auto e) {
    using E = decltype(e);
    return AttentionForwardOf<E>(ctx, Of<E>(out), att, scratch, Of<E>(qkv), B, T, C, NH, round_bits);
  });
}

absl::Status AttentionBackward(Context& ctx, kernels::Ptr dqkv, float* scratch, kernels::CPtr dout, kernels::CPtr qkv,
                               const float* att, int B, int T, int C, int NH) {
  // dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T) → dqkv (B,T,3C)
  if (auto s = CheckAttention("AttentionBackward", B, T, C, NH); !s.ok()) return s;
  RETURN_IF_ERROR(CheckType("AttentionBackward", dqkv.type, {dout, qkv}));
  return WithType(dqkv.type, [&](auto e) {
    using E = decltype(e);
    return AttentionBackwardOf<E>(ctx, Of<E>(dqkv), scratch, Of<E>(dout), Of<E>(qkv), att, B, T, C, NH);
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
