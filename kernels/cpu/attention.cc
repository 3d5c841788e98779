#include "kernels/attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/elem.h"
#include "kernels/cpu/vec_math.h"

namespace gantry::kernels {
namespace {
// Query rows are processed in blocks; a block of rows [r0, r1) only sees keys [0, r1),
// so the work above the diagonal is mostly skipped.
constexpr int kRowBlock = 64;

// One head of one sequence. q, k, v: (T, hs) rows ld apart; p: (T, T); o: (T, hs) rows ldo
// apart.
void HeadForward(const float* q, const float* k, const float* v, int ld, float* p, float* o, int ldo, int T, int hs,
                 float scale, Precision prec) {
  for (int r0 = 0; r0 < T; r0 += kRowBlock) {
    const int r1 = std::min(T, r0 + kRowBlock);
    const int rows = r1 - r0;
    float* pb = p + static_cast<int64_t>(r0) * T;
    // S[r0:r1, 0:r1] = scale * Q[r0:r1] K[0:r1]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, scale, q + static_cast<int64_t>(r0) * ld, ld,
                k, ld, 0.f, pb, T);
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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.f, pb, T, v, ld, 0.f,
                o + static_cast<int64_t>(r0) * ldo, ldo);
  }
}

// Its backward. dO: (T, hs) rows ldo apart; dq, dk, dv: rows ldd apart (overwritten); ds:
// (T, T) working memory.
void HeadBackward(const float* q, const float* k, const float* v, int ld, const float* p, const float* dO, int ldo,
                  float* dq, float* dk, float* dv, int ldd, float* ds, int T, int hs, float scale) {
  for (int t = 0; t < T; ++t) {
    std::memset(dk + static_cast<int64_t>(t) * ldd, 0, sizeof(float) * hs);
    std::memset(dv + static_cast<int64_t>(t) * ldd, 0, sizeof(float) * hs);
  }
  for (int r0 = 0; r0 < T; r0 += kRowBlock) {
    const int r1 = std::min(T, r0 + kRowBlock);
    const int rows = r1 - r0;
    const float* pb = p + static_cast<int64_t>(r0) * T;
    float* dsb = ds + static_cast<int64_t>(r0) * T;
    const float* dOb = dO + static_cast<int64_t>(r0) * ldo;
    // dP[r0:r1, 0:r1] = dO[r0:r1] V[0:r1]^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.f, dOb, ldo, v, ld, 0.f, dsb, T);
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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.f, dsb, T, k, ld, 0.f,
                dq + static_cast<int64_t>(r0) * ldd, ldd);
    // dK[0:r1] += dS[r0:r1, 0:r1]^T Q[r0:r1]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.f, dsb, T, q + static_cast<int64_t>(r0) * ld,
                ld, 1.f, dk, ldd);
    // dV[0:r1] += P[r0:r1, 0:r1]^T dO[r0:r1]
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.f, pb, T, dOb, ldo, 1.f, dv, ldd);
  }
}

// 16-bit tensors: one head's (T, w) columns of rows ld apart, widened into (T, w) fp32 rows
// (Widen), or rounded back (Narrow).
template <typename E>
void Widen(float* dst, const typename E::T* src, int64_t ld, int T, int w) {
  for (int t = 0; t < T; ++t) {
    const typename E::T* s = src + t * ld;
    float* d = dst + static_cast<int64_t>(t) * w;
#pragma omp simd
    for (int i = 0; i < w; ++i) d[i] = E::Ld(s[i]);
  }
}
template <typename E>
void Narrow(typename E::T* dst, int64_t ld, const float* src, int T, int w) {
  for (int t = 0; t < T; ++t) {
    typename E::T* d = dst + t * ld;
    const float* s = src + static_cast<int64_t>(t) * w;
#pragma omp simd
    for (int i = 0; i < w; ++i) d[i] = E::St(s[i]);
  }
}

// The calling thread's working floats (grown as needed).
float* ThreadScratch(size_t floats) {
  static thread_local std::vector<float> buf;
  if (buf.size() < floats) buf.resize(floats);
  return buf.data();
}

}  // namespace

void attention_forward(Ptr out, float* att, CPtr qkv, int B, int T, int C, int NH, Precision prec, float scale) {
  // qkv (B,T,3C) → out (B,T,C), att (B,NH,T,T)
  const int hs = C / NH;
  if (scale == 0.f) scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int C3 = 3 * C;
  elem::With(out.type, [&](auto e) {
    using E = decltype(e);
    const typename E::T* in = elem::Of<E>(qkv);
    typename E::T* o16 = elem::Of<E>(out);
#pragma omp parallel for schedule(static) collapse(2)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const int64_t base = static_cast<int64_t>(b) * T * C3 + h * hs;
        float* p = att + (static_cast<int64_t>(b) * NH + h) * T * T;
        const int64_t obase = static_cast<int64_t>(b) * T * C + h * hs;
        if constexpr (E::kType == Precision::kFp32) {
          HeadForward(in + base, in + base + C, in + base + 2 * C, C3, p, o16 + obase, C, T, hs, scale, prec);
        } else {  // the head's q, k, v widened, its output rounded back
          const int64_t th = static_cast<int64_t>(T) * hs;
          float* w = ThreadScratch(static_cast<size_t>(4 * th));
          for (int i = 0; i < 3; ++i) Widen<E>(w + i * th, in + base + i * C, C3, T, hs);
          HeadForward(w, w + th, w + 2 * th, hs, p, w + 3 * th, hs, T, hs, scale, prec);
          Narrow<E>(o16 + obase, C, w + 3 * th, T, hs);
        }
      }
    }
  });
}

void attention_backward(Ptr dqkv, float* scratch, CPtr dout, CPtr qkv, const float* att, int B, int T, int C,
                        int NH, float scale) {
  // dout (B,T,C) → dqkv (B,T,3C)
  const int hs = C / NH;
  if (scale == 0.f) scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int C3 = 3 * C;
  elem::With(dqkv.type, [&](auto e) {
    using E = decltype(e);
    const typename E::T* in = elem::Of<E>(qkv);
    const typename E::T* dO = elem::Of<E>(dout);
    typename E::T* d = elem::Of<E>(dqkv);
#pragma omp parallel for schedule(static) collapse(2)
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const int64_t base = static_cast<int64_t>(b) * T * C3 + h * hs;
        const int64_t obase = static_cast<int64_t>(b) * T * C + h * hs;
        const float* p = att + (static_cast<int64_t>(b) * NH + h) * T * T;
        float* ds = scratch + (static_cast<int64_t>(b) * NH + h) * T * T;
        if constexpr (E::kType == Precision::kFp32) {
          HeadBackward(in + base, in + base + C, in + base + 2 * C, C3, p, dO + obase, C, d + base, d + base + C,
                       d + base + 2 * C, C3, ds, T, hs, scale);
        } else {  // q, k, v and dO widened; dq, dk, dv computed in fp32 and rounded back
          const int64_t th = static_cast<int64_t>(T) * hs;
          float* w = ThreadScratch(static_cast<size_t>(7 * th));
          for (int i = 0; i < 3; ++i) Widen<E>(w + i * th, in + base + i * C, C3, T, hs);
          Widen<E>(w + 3 * th, dO + obase, C, T, hs);
          float* g = w + 4 * th;
          HeadBackward(w, w + th, w + 2 * th, hs, p, w + 3 * th, hs, g, g + th, g + 2 * th, hs, ds, T, hs, scale);
          for (int i = 0; i < 3; ++i) Narrow<E>(d + base + i * C, C3, g + i * th, T, hs);
        }
      }
    }
  });
}

void attention_lse(float* lse, const float* qkv, int B, int T, int C, int NH, float scale_f) {
  // qkv (B,T,3C) → lse (B,NH,T)
  const int hs = C / NH;
  const double scale = scale_f != 0.f ? static_cast<double>(scale_f) : 1.0 / std::sqrt(static_cast<double>(hs));
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
