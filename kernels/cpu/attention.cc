#include "kernels/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/vec_math.h"

namespace gantry::kernels {
namespace {
// Query rows are processed in blocks; a block of rows [r0, r1) only sees keys [0, r1),
// so the work above the diagonal is mostly skipped.
constexpr int kRowBlock = 64;
}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH, Precision prec) {
  // qkv (B,T,3C) → out (B,T,C), att (B,NH,T,T)
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int C3 = 3 * C;
#pragma omp parallel for schedule(static) collapse(2)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv + static_cast<int64_t>(b) * T * C3 + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* p = att + (static_cast<int64_t>(b) * NH + h) * T * T;
      float* o = out + static_cast<int64_t>(b) * T * C + h * hs;
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock);
        const int rows = r1 - r0;
        float* pb = p + static_cast<int64_t>(r0) * T;
        // S[r0:r1, 0:r1] = scale * Q[r0:r1] K[0:r1]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, scale,
                    q + static_cast<int64_t>(r0) * C3, C3, k, C3, 0.f, pb, T);
        for (int t = r0; t < r1; ++t) {
          float* row = p + static_cast<int64_t>(t) * T;
          float mx = row[0];
#pragma omp simd reduction(max : mx)
          for (int s = 1; s <= t; ++s) mx = std::max(mx, row[s]);
          float sum = 0.f;
#pragma omp simd reduction(+ : sum)
          for (int s = 0; s <= t; ++s) {
            row[s] = vec::Exp(row[s] - mx);
            sum += row[s];
          }
          const float inv = 1.0f / sum;
          if (prec != Precision::kFp32) round_to(row, row, t + 1, prec);  // the weights, not their sum
#pragma omp simd
          for (int s = 0; s <= t; ++s) row[s] *= inv;
          std::memset(row + t + 1, 0, sizeof(float) * (T - t - 1));
        }
        // O[r0:r1] = P[r0:r1, 0:r1] V[0:r1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.f, pb, T, v, C3,
                    0.f, o + static_cast<int64_t>(r0) * C, C);
      }
    }
  }
}

void attention_backward(float* dqkv, float* scratch, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH) {
  // dout (B,T,C) → dqkv (B,T,3C)
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int C3 = 3 * C;
#pragma omp parallel for schedule(static) collapse(2)
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const int64_t base = static_cast<int64_t>(b) * T * C3 + h * hs;
      const float* q = qkv + base;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv + base;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* p = att + (static_cast<int64_t>(b) * NH + h) * T * T;
      float* ds = scratch + (static_cast<int64_t>(b) * NH + h) * T * T;
      const float* dO = dout + static_cast<int64_t>(b) * T * C + h * hs;
      for (int t = 0; t < T; ++t) {
        std::memset(dk + static_cast<int64_t>(t) * C3, 0, sizeof(float) * hs);
        std::memset(dv + static_cast<int64_t>(t) * C3, 0, sizeof(float) * hs);
      }
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock);
        const int rows = r1 - r0;
        const float* pb = p + static_cast<int64_t>(r0) * T;
        float* dsb = ds + static_cast<int64_t>(r0) * T;
        const float* dOb = dO + static_cast<int64_t>(r0) * C;
        // dP[r0:r1, 0:r1] = dO[r0:r1] V[0:r1]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.f, dOb, C, v, C3,
                    0.f, dsb, T);
        // dS = P * (dP - rowsum(P * dP)) * scale, causal part only
        for (int t = r0; t < r1; ++t) {
          const float* prow = p + static_cast<int64_t>(t) * T;
          float* drow = ds + static_cast<int64_t>(t) * T;
          float dot = 0.f;
#pragma omp simd reduction(+ : dot)
          for (int s = 0; s <= t; ++s) dot += prow[s] * drow[s];
#pragma omp simd
          for (int s = 0; s <= t; ++s) drow[s] = prow[s] * (drow[s] - dot) * scale;
          for (int s = t + 1; s < r1; ++s) drow[s] = 0.f;
        }
        // dQ[r0:r1] = dS[r0:r1, 0:r1] K[0:r1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.f, dsb, T, k, C3,
                    0.f, dq + static_cast<int64_t>(r0) * C3, C3);
        // dK[0:r1] += dS[r0:r1, 0:r1]^T Q[r0:r1]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.f, dsb, T,
                    q + static_cast<int64_t>(r0) * C3, C3, 1.f, dk, C3);
        // dV[0:r1] += P[r0:r1, 0:r1]^T dO[r0:r1]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.f, pb, T, dOb, C,
                    1.f, dv, C3);
      }
    }
  }
}

void attention_lse(float* lse, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> s(static_cast<size_t>(T));
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int i = 0; i < T; ++i) {
        const float* q = qkv + (static_cast<int64_t>(b) * T + i) * 3 * C + h * hs;
        double mx = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          const float* k = qkv + (static_cast<int64_t>(b) * T + j) * 3 * C + C + h * hs;
          double dot = 0;
          for (int d = 0; d < hs; ++d) dot += static_cast<double>(q[d]) * k[d];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += std::exp(s[j] - mx);
        lse[(static_cast<int64_t>(b) * NH + h) * T + i] = static_cast<float>(mx + std::log(sum));
      }
    }
  }
}

}  // namespace gantry::kernels
