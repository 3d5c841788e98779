// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// Context parallelism's block attention on the GPU, the twins of kernels/cpu/attention_block.cc
// (kernels/attention_block.h states the ops): a query block against a key/value block merged
// by log-sum-exps into the running (out, lse), D = rowsum(dout·out), and the block's backward.
// Also the strided copy the ring packs its K/V blocks with (Backend::CopyRows).
//
// A warp per row, fp32: lane l holds dimensions l, l + 32, l + 64 and l + 96 of a head (head
// size up to 128), a score is the warp's sum of the lanes' products (a fixed xor tree), and
// the other side's rows are streamed from memory in order. The forward keeps the online
// softmax (running max m and sum l) in registers and merges at the end:
//   lse' = max(lse, lb) + log1p(exp(-|lse - lb|)),  out' = exp(lse - lse') out + exp(lb - lse') o_b,
// lb = m + log(l) the block's log-sum-exp and o_b its softmax-weighted values, as the cpu twin.
// The backward writes dQ with a warp per query row (keys streamed) and dK, dV with a warp per
// key/value row (its group's query heads and rows streamed): no atomics, the same bits run to
// run. Plain loops rather than the fused kernels' tiles (flash_attention.cuh): the ring's
// blocks are its T/(2·cp) rows, and this path's speed is not measured yet (docs/perf/gpu.md).
#include "kernels/cuda/round.cuh"
#include "kernels/cuda/ns.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/attention_block.h"
#include "kernels/cuda/attention_block_16bit.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/gqa.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

using kernels::AttentionBlock;
using kernels::HeadRows;
using kernels::RowStats;

constexpr int kPerLane = 4;                  // a head's dimensions per lane
constexpr int kMaxHead = 32 * kPerLane;      // 128
constexpr int kWarps = 8;                    // warps a block
constexpr int kThreads = 32 * kWarps;

// Row t of head h of sequence b.
template <typename T>
__device__ inline T* Row(HeadRows<T> x, int b, int h, int hd, int t) {
  return x.data + static_cast<int64_t>(b) * x.seq + static_cast<int64_t>(t) * x.row + static_cast<int64_t>(h) * hd;
}
template <typename T>
__device__ inline T* Stat(RowStats<T> x, int b, int h, int NH, int t) {
  return x.data + (static_cast<int64_t>(b) * NH + h) * x.ld + t;
}
// This lane's dimensions of a row (0 past hd).
__device__ inline void Load(float (&x)[kPerLane], const float* row, int hd) {
  const int lane = threadIdx.x % 32;
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + 32 * c;
    x[c] = d < hd ? row[d] : 0.f;
  }
}
// row[d] += x over this lane's dimensions.
__device__ inline void Add(float* row, const float (&x)[kPerLane], int hd) {
  const int lane = threadIdx.x % 32;
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < hd) row[d] += x[c];
  }
}
// The warp's dot product of two rows held a share a lane.
__device__ inline float Dot(const float (&a)[kPerLane], const float (&b)[kPerLane]) {
  float s = 0.f;
  for (int c = 0; c < kPerLane; ++c) s = fmaf(a[c], b[c], s);
  return WarpSum(s);
}
__device__ inline int64_t WarpIndex() { return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; }

// A warp per query row (b, h, i) of B·NH·Lq.
__global__ void BlockForwardKernel(HeadRows<float> out, RowStats<float> lse, HeadRows<const float> q,
                                   HeadRows<const float> k, HeadRows<const float> v, AttentionBlock a, float scale) {
  const int64_t w = WarpIndex();
  if (w >= static_cast<int64_t>(a.B) * a.NH * a.Lq) return;
  const int i = static_cast<int>(w % a.Lq), h = static_cast<int>(w / a.Lq % a.NH), b = static_cast<int>(w / a.Lq / a.NH);
  const int g = h / (a.NH / a.NKV);
  float* l_at = Stat(lse, b, h, a.NH, i);
  // What the row holds, read before the keys' loop: its sums order the warp's lanes before
  // lane 0 writes the merged value.
  const float held = a.first ? -INFINITY : *l_at;
  float qr[kPerLane], o[kPerLane] = {};
  Load(qr, Row(q, b, h, a.hd, i), a.hd);
  float m = -INFINITY, l = 0.f;
  const int n = a.causal ? i + 1 : a.Lk;
  for (int j = 0; j < n; ++j) {
    float kr[kPerLane], vr[kPerLane];
    Load(kr, Row(k, b, g, a.hd, j), a.hd);
    Load(vr, Row(v, b, g, a.hd, j), a.hd);
    const float s = Dot(qr, kr) * scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), p = expf(s - m_new);  // corr 0 at the first key (m = -inf)
    l = fmaf(l, corr, p);
    for (int c = 0; c < kPerLane; ++c) o[c] = fmaf(p, vr[c], o[c] * corr);
    m = m_new;
  }
  const float lb = m + logf(l);
  float merged = lb, keep = 0.f;
  if (held != -INFINITY) {
    merged = fmaxf(held, lb) + log1pf(expf(-fabsf(held - lb)));
    keep = expf(held - merged);
  }
  const float wgt = expf(lb - merged) / l;
  float* orow = Row(out, b, h, a.hd, i);
  const int lane = threadIdx.x % 32;
  for (int c = 0; c < kPerLane; ++c) {
    const int d = lane + 32 * c;
    if (d < a.hd) orow[d] = (keep == 0.f ? 0.f : orow[d] * keep) + wgt * o[c];
  }
  if (lane == 0) *l_at = merged;
}

// A warp per row (b, h, i) of B·NH·L: D = dout_i · out_i.
__global__ void BlockDeltaKernel(RowStats<float> D, HeadRows<const float> dout, HeadRows<const float> out, int B,
                                 int NH, int hd, int L) {
  const int64_t w = WarpIndex();
  if (w >= static_cast<int64_t>(B) * NH * L) return;
  const int i = static_cast<int>(w % L), h = static_cast<int>(w / L % NH), b = static_cast<int>(w / L / NH);
  float g[kPerLane], o[kPerLane];
  Load(g, Row(dout, b, h, hd, i), hd);
  Load(o, Row(out, b, h, hd, i), hd);
  const float s = Dot(g, o);
  if (threadIdx.x % 32 == 0) *Stat(D, b, h, NH, i) = s;
}

// dQ: a warp per query row (b, h, i); dq_i += Σ_j ds_ij k_j, ds_ij = p_ij (dout_i·v_j − D_i)·scale.
__global__ void BlockBackwardQKernel(HeadRows<float> dq, HeadRows<const float> q, HeadRows<const float> k,
                                     HeadRows<const float> v, HeadRows<const float> dout, RowStats<const float> lse,
                                     RowStats<const float> D, AttentionBlock a, float scale) {
  const int64_t w = WarpIndex();
  if (w >= static_cast<int64_t>(a.B) * a.NH * a.Lq) return;
  const int i = static_cast<int>(w % a.Lq), h = static_cast<int>(w / a.Lq % a.NH), b = static_cast<int>(w / a.Lq / a.NH);
  const int g = h / (a.NH / a.NKV);
  float qr[kPerLane], gr[kPerLane], acc[kPerLane] = {};
  Load(qr, Row(q, b, h, a.hd, i), a.hd);
  Load(gr, Row(dout, b, h, a.hd, i), a.hd);
  const float l_i = *Stat(lse, b, h, a.NH, i), D_i = *Stat(D, b, h, a.NH, i);
  const int n = a.causal ? i + 1 : a.Lk;
  for (int j = 0; j < n; ++j) {
    float kr[kPerLane], vr[kPerLane];
    Load(kr, Row(k, b, g, a.hd, j), a.hd);
    Load(vr, Row(v, b, g, a.hd, j), a.hd);
    const float p = expf(Dot(qr, kr) * scale - l_i);
    const float ds = p * (Dot(gr, vr) - D_i) * scale;
    for (int c = 0; c < kPerLane; ++c) acc[c] = fmaf(ds, kr[c], acc[c]);
  }
  Add(Row(dq, b, h, a.hd, i), acc, a.hd);
}

// dK, dV: a warp per key/value row (b, g, j), over the query heads of group g and the query
// rows that see key j; dk_j += Σ ds_ij q_i, dv_j += Σ p_ij dout_i.
__global__ void BlockBackwardKVKernel(HeadRows<float> dk, HeadRows<float> dv, HeadRows<const float> q,
                                      HeadRows<const float> k, HeadRows<const float> v, HeadRows<const float> dout,
                                      RowStats<const float> lse, RowStats<const float> D, AttentionBlock a,
                                      float scale) {
  const int64_t w = WarpIndex();
  if (w >= static_cast<int64_t>(a.B) * a.NKV * a.Lk) return;
  const int j = static_cast<int>(w % a.Lk), g = static_cast<int>(w / a.Lk % a.NKV), b = static_cast<int>(w / a.Lk / a.NKV);
  const int group = a.NH / a.NKV;
  float kr[kPerLane], vr[kPerLane], dk_acc[kPerLane] = {}, dv_acc[kPerLane] = {};
  Load(kr, Row(k, b, g, a.hd, j), a.hd);
  Load(vr, Row(v, b, g, a.hd, j), a.hd);
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int i = a.causal ? j : 0; i < a.Lq; ++i) {
      float qr[kPerLane], gr[kPerLane];
      Load(qr, Row(q, b, h, a.hd, i), a.hd);
      Load(gr, Row(dout, b, h, a.hd, i), a.hd);
      const float p = expf(Dot(qr, kr) * scale - *Stat(lse, b, h, a.NH, i));
      const float ds = p * (Dot(gr, vr) - *Stat(D, b, h, a.NH, i)) * scale;
      for (int c = 0; c < kPerLane; ++c) {
        dv_acc[c] = fmaf(p, gr[c], dv_acc[c]);
        dk_acc[c] = fmaf(ds, qr[c], dk_acc[c]);
      }
    }
  }
  Add(Row(dk, b, g, a.hd, j), dk_acc, a.hd);
  Add(Row(dv, b, g, a.hd, j), dv_acc, a.hd);
}

// A thread per element of rows x width.
__global__ void CopyRowsKernel(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t width,
                               int64_t n) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int64_t r = idx / width, c = idx % width;
  dst[r * dst_stride + c] = src[r * src_stride + c];
}

// The ring's blocks on cuDNN: a thread per element (rows x width) of B·L rows.
template <typename E>
__global__ void NarrowRowsKernel(typename E::T* dst, int64_t dst_row, HeadRows<const float> src, int L, int width,
                                 int64_t n) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int64_t r = idx / width, c = idx % width, b = r / L, t = r % L;
  dst[r * dst_row + c] = E::St(src.data[b * src.seq + t * src.row + c]);
}
template <typename E>
__global__ void AddRowsKernel(HeadRows<float> dst, const typename E::T* src, int64_t src_row, int L, int width,
                              int64_t n) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int64_t r = idx / width, c = idx % width, b = r / L, t = r % L;
  dst.data[b * dst.seq + t * dst.row + c] += E::Ld(src[r * src_row + c]);
}
// A thread per row (b, h, i) of B·NH·L: the block's o_b (its own softmax's output, 16-bit) and
// lb merged into the row's out and lse, as BlockForwardKernel merges.
template <typename E>
__global__ void MergeBlockKernel(HeadRows<float> out, RowStats<float> lse, const typename E::T* o, const float* lse_b,
                                 int NH, int hd, int L, bool first, int64_t n) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= n) return;
  const int i = static_cast<int>(idx % L), h = static_cast<int>(idx / L % NH), b = static_cast<int>(idx / L / NH);
  float* l_at = Stat(lse, b, h, NH, i);
  const float held = first ? -INFINITY : *l_at, lb = lse_b[idx];
  float merged = lb, keep = 0.f;
  if (held != -INFINITY) {
    merged = fmaxf(held, lb) + log1pf(expf(-fabsf(held - lb)));
    keep = expf(held - merged);
  }
  const float wgt = expf(lb - merged);
  float* orow = Row(out, b, h, hd, i);
  const typename E::T* brow = o + (static_cast<int64_t>(b) * L + i) * NH * hd + static_cast<int64_t>(h) * hd;
  for (int d = 0; d < hd; ++d) orow[d] = (keep == 0.f ? 0.f : orow[d] * keep) + wgt * E::Ld(brow[d]);
  *l_at = merged;
}

absl::Status CheckBlock(const char* op, const AttentionBlock& a) {
  RETURN_IF_ERROR(CheckDims(op, {a.B, a.NH, a.NKV, a.hd, a.Lq, a.Lk}));
  RETURN_IF_ERROR(kernels::CheckGroups(op, a.NH, a.NKV, a.hd));
  if (a.hd > kMaxHead) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": head size ", a.hd, " is over ", kMaxHead));
  }
  if (a.causal && a.Lq != a.Lk) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": a causal (diagonal) block has as many query rows as key rows, not ", a.Lq, " and ", a.Lk));
  }
  return absl::OkStatus();
}
float ScaleOf(const AttentionBlock& a) { return a.scale != 0.f ? a.scale : 1.0f / std::sqrt(static_cast<float>(a.hd)); }

}  // namespace

absl::Status AttentionBlockForward(Context& ctx, HeadRows<float> out, RowStats<float> lse, HeadRows<const float> q,
                                   HeadRows<const float> k, HeadRows<const float> v, const AttentionBlock& a) {
  RETURN_IF_ERROR(CheckBlock("AttentionBlockForward", a));
  const int64_t warps = static_cast<int64_t>(a.B) * a.NH * a.Lq;
  GANTRY_LAUNCH(BlockForwardKernel, CeilDiv(warps, kWarps), kThreads, 0, ctx.stream())(out, lse, q, k, v, a,
                                                                                       ScaleOf(a));
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status AttentionBlockDelta(Context& ctx, RowStats<float> D, HeadRows<const float> dout, HeadRows<const float> out,
                                 int B, int NH, int hd, int L) {
  RETURN_IF_ERROR(CheckDims("AttentionBlockDelta", {B, NH, hd, L}));
  if (hd > kMaxHead) {
    return absl::InvalidArgumentError(absl::StrCat("AttentionBlockDelta: head size ", hd, " is over ", kMaxHead));
  }
  const int64_t warps = static_cast<int64_t>(B) * NH * L;
  GANTRY_LAUNCH(BlockDeltaKernel, CeilDiv(warps, kWarps), kThreads, 0, ctx.stream())(D, dout, out, B, NH, hd, L);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status AttentionBlockBackward(Context& ctx, HeadRows<float> dq, HeadRows<float> dk, HeadRows<float> dv,
                                    HeadRows<const float> q, HeadRows<const float> k, HeadRows<const float> v,
                                    HeadRows<const float> dout, RowStats<const float> lse, RowStats<const float> D,
                                    const AttentionBlock& a) {
  RETURN_IF_ERROR(CheckBlock("AttentionBlockBackward", a));
  const float scale = ScaleOf(a);
  const int64_t q_warps = static_cast<int64_t>(a.B) * a.NH * a.Lq, kv_warps = static_cast<int64_t>(a.B) * a.NKV * a.Lk;
  GANTRY_LAUNCH(BlockBackwardQKernel, CeilDiv(q_warps, kWarps), kThreads, 0, ctx.stream())(dq, q, k, v, dout, lse, D,
                                                                                           a, scale);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  GANTRY_LAUNCH(BlockBackwardKVKernel, CeilDiv(kv_warps, kWarps), kThreads, 0, ctx.stream())(dk, dv, q, k, v, dout,
                                                                                             lse, D, a, scale);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CopyRows(Context& ctx, float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                      int64_t width, int64_t rows) {
  if (width < 0 || rows < 0 || dst_stride < width || src_stride < width) {
    return absl::InvalidArgumentError(absl::StrCat("CopyRows: ", rows, " rows of ", width, " floats with strides ",
                                                   dst_stride, " (dst) and ", src_stride,
                                                   " (src): each stride must be at least the width"));
  }
  const int64_t n = width * rows;
  if (n == 0) return absl::OkStatus();
  GANTRY_LAUNCH(CopyRowsKernel, CeilDiv(n, 256), 256, 0, ctx.stream())(dst, dst_stride, src, src_stride, width, n);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status NarrowRows(Context& ctx, kernels::Ptr dst, int64_t dst_row, HeadRows<const float> src, int B, int L,
                        int width) {
  RETURN_IF_ERROR(CheckDims("NarrowRows", {B, L, width}));
  if (dst.f32() || dst_row < width) {
    return absl::InvalidArgumentError(absl::StrCat("NarrowRows: a 16-bit destination of rows at least ", width,
                                                   " wide, not ", kernels::PrecisionName(dst.type), " rows of ",
                                                   dst_row));
  }
  const int64_t n = static_cast<int64_t>(B) * L * width;
  return WithType(dst.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(NarrowRowsKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(Of<E>(dst), dst_row, src, L, width, n);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status AddRows(Context& ctx, HeadRows<float> dst, kernels::CPtr src, int64_t src_row, int B, int L, int width) {
  RETURN_IF_ERROR(CheckDims("AddRows", {B, L, width}));
  if (src.f32() || src_row < width) {
    return absl::InvalidArgumentError(absl::StrCat("AddRows: a 16-bit source of rows at least ", width, " wide, not ",
                                                   kernels::PrecisionName(src.type), " rows of ", src_row));
  }
  const int64_t n = static_cast<int64_t>(B) * L * width;
  return WithType(src.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(AddRowsKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(dst, Of<E>(src), src_row, L, width, n);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

absl::Status MergeBlock(Context& ctx, HeadRows<float> out, RowStats<float> lse, kernels::CPtr o, const float* lse_b,
                        int B, int NH, int hd, int L, bool first) {
  RETURN_IF_ERROR(CheckDims("MergeBlock", {B, NH, hd, L}));
  if (o.f32()) return absl::InvalidArgumentError("MergeBlock: the block's output is 16-bit, not fp32");
  const int64_t n = static_cast<int64_t>(B) * NH * L;
  return WithType(o.type, [&](auto e) -> absl::Status {
    using E = decltype(e);
    GANTRY_LAUNCH(MergeBlockKernel<E>, CeilDiv(n, 256), 256, 0, ctx.stream())(out, lse, Of<E>(o), lse_b, NH, hd, L,
                                                                            first, n);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  });
}

}  // namespace gantry::GANTRY_CUDA_NS
