#include "kernels/attention_block.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace gantry::kernels {
namespace {

// Query rows go a tile at a time, so that the scores' working memory is a tile's (kTile · Lk),
// not Lq · Lk; in a causal block a tile of rows [r0, r1) only sees keys [0, r1).
constexpr int kTile = 64;

float DefaultScale(const AttentionBlock& a) {
  return a.scale != 0.f ? a.scale : 1.0f / std::sqrt(static_cast<float>(a.hd));
}

// The keys query row t of a block sees.
int Seen(const AttentionBlock& a, int t) { return a.causal ? t + 1 : a.Lk; }

// The keys a tile ending at row r1 (exclusive) reads: the scores' columns.
int TileColumns(const AttentionBlock& a, int r1) { return a.causal ? r1 : a.Lk; }

template <typename T>
T* At(HeadRows<T> x, int b, int h, int hd) {
  return x.data + static_cast<int64_t>(b) * x.seq + static_cast<int64_t>(h) * hd;
}
template <typename T>
T* At(RowStats<T> x, int b, int h, int NH) {
  return x.data + (static_cast<int64_t>(b) * NH + h) * x.ld;
}

}  // namespace

void attention_block_forward(HeadRows<float> out, RowStats<float> lse, HeadRows<const float> q,
                             HeadRows<const float> k, HeadRows<const float> v, const AttentionBlock& a) {
  // q (B, Lq, NH·hd), k, v (B, Lk, NKV·hd) → out (B, Lq, NH·hd), lse (B, NH, Lq), merged
  const float scale = DefaultScale(a);
  const int group = a.NH / a.NKV, hd = a.hd;
#pragma omp parallel
  {
    std::vector<float> s(static_cast<size_t>(kTile) * static_cast<size_t>(a.Lk));
#pragma omp for schedule(static) collapse(2)
    for (int b = 0; b < a.B; ++b) {
      for (int h = 0; h < a.NH; ++h) {
        const float* qh = At(q, b, h, hd);
        const float* kh = At(k, b, h / group, hd);
        const float* vh = At(v, b, h / group, hd);
        float* oh = At(out, b, h, hd);
        float* lh = At(lse, b, h, a.NH);
        for (int r0 = 0; r0 < a.Lq; r0 += kTile) {
          const int r1 = std::min(a.Lq, r0 + kTile), rows = r1 - r0, cols = TileColumns(a, r1);
          // S = scale · Q[r0:r1] K[0:cols]^T
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hd, scale, qh + r0 * q.row,
                      static_cast<int>(q.row), kh, static_cast<int>(k.row), 0.f, s.data(), cols);
          for (int t = r0; t < r1; ++t) {
            float* row = s.data() + static_cast<int64_t>(t - r0) * cols;
            const int n = Seen(a, t);
            float mx = row[0];
            for (int j = 1; j < n; ++j) mx = std::max(mx, row[j]);
            float sum = 0.f;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < n; ++j) {
              row[j] = vec::Exp(row[j] - mx);
              sum += row[j];
            }
            std::fill(row + n, row + cols, 0.f);
            // This block's log-sum-exp, and the merge with what the row holds.
            const float lb = mx + std::log(sum), l = a.first ? -INFINITY : lh[t];
            float* orow = oh + static_cast<int64_t>(t) * out.row;
            float merged = lb, keep = 0.f;
            if (l != -INFINITY) {
              merged = std::max(l, lb) + std::log1p(std::exp(-std::fabs(l - lb)));
              keep = std::exp(l - merged);
            }
            if (keep == 0.f) {
              std::fill(orow, orow + hd, 0.f);
            } else {
              for (int d = 0; d < hd; ++d) orow[d] *= keep;
            }
            const float w = std::exp(lb - merged) / sum;
#pragma omp simd
            for (int j = 0; j < n; ++j) row[j] *= w;
            lh[t] = merged;
          }
          // out[r0:r1] += P V[0:cols]
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, cols, 1.f, s.data(), cols, vh,
                      static_cast<int>(v.row), 1.f, oh + r0 * out.row, static_cast<int>(out.row));
        }
      }
    }
  }
}

void attention_block_delta(RowStats<float> D, HeadRows<const float> dout, HeadRows<const float> out, int B, int NH,
                           int hd, int L) {
  // dout, out (B, L, NH·hd) → D (B, NH, L)
#pragma omp parallel for schedule(static) collapse(2)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* g = At(dout, b, h, hd);
      const float* o = At(out, b, h, hd);
      float* dh = At(D, b, h, NH);
      for (int t = 0; t < L; ++t) {
        float dot = 0.f;
        for (int d = 0; d < hd; ++d) dot += g[t * dout.row + d] * o[t * out.row + d];
        dh[t] = dot;
      }
    }
  }
}

void attention_block_backward(HeadRows<float> dq, HeadRows<float> dk, HeadRows<float> dv, HeadRows<const float> q,
                              HeadRows<const float> k, HeadRows<const float> v, HeadRows<const float> dout,
                              RowStats<const float> lse, RowStats<const float> D, const AttentionBlock& a) {
  // q, dout (B, Lq, NH·hd), k, v (B, Lk, NKV·hd), lse, D (B, NH, Lq) → dq += , dk += , dv +=
  const float scale = DefaultScale(a);
  const int group = a.NH / a.NKV, hd = a.hd;
  // One thread per key/value head: the query heads of its group all add into its dk and dv.
#pragma omp parallel
  {
    const size_t tile = static_cast<size_t>(kTile) * static_cast<size_t>(a.Lk);
    std::vector<float> p(tile), ds(tile);
#pragma omp for schedule(static) collapse(2)
    for (int b = 0; b < a.B; ++b) {
      for (int g = 0; g < a.NKV; ++g) {
        const float* kh = At(k, b, g, hd);
        const float* vh = At(v, b, g, hd);
        float* dkh = At(dk, b, g, hd);
        float* dvh = At(dv, b, g, hd);
        for (int h = g * group; h < (g + 1) * group; ++h) {
          const float* qh = At(q, b, h, hd);
          const float* gh = At(dout, b, h, hd);
          float* dqh = At(dq, b, h, hd);
          const float* lh = At(lse, b, h, a.NH);
          const float* Dh = At(D, b, h, a.NH);
          for (int r0 = 0; r0 < a.Lq; r0 += kTile) {
            const int r1 = std::min(a.Lq, r0 + kTile), rows = r1 - r0, cols = TileColumns(a, r1);
            // P = exp(scale · Q K^T - lse), dP = dO V^T
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hd, scale, qh + r0 * q.row,
                        static_cast<int>(q.row), kh, static_cast<int>(k.row), 0.f, p.data(), cols);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hd, 1.f, gh + r0 * dout.row,
                        static_cast<int>(dout.row), vh, static_cast<int>(v.row), 0.f, ds.data(), cols);
            for (int t = r0; t < r1; ++t) {
              float* prow = p.data() + static_cast<int64_t>(t - r0) * cols;
              float* drow = ds.data() + static_cast<int64_t>(t - r0) * cols;
              const int n = Seen(a, t);
              const float l = lh[t], dt = Dh[t];
#pragma omp simd
              for (int j = 0; j < n; ++j) {
                prow[j] = vec::Exp(prow[j] - l);
                drow[j] = prow[j] * (drow[j] - dt) * scale;
              }
              std::fill(prow + n, prow + cols, 0.f);
              std::fill(drow + n, drow + cols, 0.f);
            }
            // dQ[r0:r1] += dS K, dK[0:cols] += dS^T Q[r0:r1], dV[0:cols] += P^T dO[r0:r1]
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, cols, 1.f, ds.data(), cols, kh,
                        static_cast<int>(k.row), 1.f, dqh + r0 * dq.row, static_cast<int>(dq.row));
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd, rows, 1.f, ds.data(), cols,
                        qh + r0 * q.row, static_cast<int>(q.row), 1.f, dkh, static_cast<int>(dk.row));
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd, rows, 1.f, p.data(), cols,
                        gh + r0 * dout.row, static_cast<int>(dout.row), 1.f, dvh, static_cast<int>(dv.row));
          }
        }
      }
    }
  }
}

}  // namespace gantry::kernels
