#include "kernels/matmul.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cpu/blocks.h"
#include "kernels/cpu/column_blocks.h"
#include "kernels/cpu/elem.h"
#include "kernels/cpu/gemm16.h"
#include "kernels/cpu/vec_math.h"

namespace gantry::kernels {
namespace {

// C (M,N) = op(A) op(B) + beta C, row-major. The output is cut into blocks of rows (or of
// columns, whichever dimension is larger) by its shape alone (kernels/cpu/blocks.h), and the
// blocks are shared out over the threads of our own OpenMP team, each a single-threaded sgemm
// (OpenBLAS's OpenMP build does not fork inside a parallel region). Keeping every thread in
// one team matters: when OpenBLAS forked its own team right after one of ours, the
// idle-spinning threads cost each GEMM 30-60% (docs/perf/cpu.md). Each output element is computed
// by one call whose extent the shape fixes, so results do not depend on the thread count.
// `after(r0, r1)` runs on the thread that computed rows [r0, r1) (row blocks only), while
// those rows are still in cache.
template <typename After>
void Gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc, After&& after) {
  const CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE TB = tb ? CblasTrans : CblasNoTrans;
  const int64_t work = static_cast<int64_t>(M) * N * K;
  if (work < (int64_t{1} << 18)) {
    cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
    after(0, M);
    return;
  }
  const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool split_rows = M >= N;
  const int total = split_rows ? M : N;
  const int nb = ShapeBlocks(total);
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int b = 0; b < nb; ++b) {
    int i0, i1;
    Slice(total, b, nb, 16, &i0, &i1);  // edges on multiples of 16: whole cache lines of the output
    if (i1 <= i0) continue;
    if (split_rows) {
      const float* a = ta ? A + i0 : A + static_cast<int64_t>(i0) * lda;
      cblas_sgemm(CblasRowMajor, TA, TB, i1 - i0, N, K, 1.f, a, lda, B, ldb, beta,
                  C + static_cast<int64_t>(i0) * ldc, ldc);
      after(i0, i1);
    } else {
      const float* b = tb ? B + static_cast<int64_t>(i0) * ldb : B + i0;
      cblas_sgemm(CblasRowMajor, TA, TB, M, i1 - i0, K, 1.f, A, lda, b, ldb, beta, C + i0, ldc);
    }
  }
  if (!split_rows) after(0, M);
}

void Gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  Gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, [](int, int) {});
}

void MatmulForward32(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC,
                     WeightLayout layout) {
  // inp (N,C) @ W → out (N,OC), then + bias on each thread's rows while they are in cache.
  const bool tb = layout == WeightLayout::kOutIn;
  Gemm(false, tb, N, OC, C, inp, C, weight, tb ? C : OC, 0.f, out, OC, [&](int r0, int r1) {
    if (bias == nullptr) return;
    for (int n = r0; n < r1; ++n) {
      float* o = out + static_cast<int64_t>(n) * OC;
#pragma omp simd
      for (int j = 0; j < OC; ++j) o[j] += bias[j];
    }
  });
}

void MatmulBiasGeluForward32(float* pre, float* out, const float* inp, const float* weight, const float* bias, int N,
                             int C, int OC) {
  // inp (N,C) @ W (C,OC) + bias → pre (N,OC), gelu(pre) → out (N,OC), per thread's rows
  Gemm(false, false, N, OC, C, inp, C, weight, OC, 0.f, pre, OC, [&](int r0, int r1) {
    for (int n = r0; n < r1; ++n) {
      float* p = pre + static_cast<int64_t>(n) * OC;
      float* o = out + static_cast<int64_t>(n) * OC;
#pragma omp simd
      for (int j = 0; j < OC; ++j) {
        p[j] += bias[j];
        o[j] = vec::Gelu(p[j]);
      }
    }
  });
}

// dbias (OC) += the column sums of dout (N, OC) of E's type, rows in order (deterministic).
template <typename E>
void ColumnSums(float* dbias, const typename E::T* dout, int N, int OC) {
  constexpr int kCols = 64;
  ParallelColumnBlocks<kCols>(OC, [&](int o0, int o1) {
    float acc[kCols] = {0};
    for (int n = 0; n < N; ++n) {
      const typename E::T* d = dout + static_cast<int64_t>(n) * OC;
      for (int o = o0; o < o1; ++o) acc[o - o0] += E::Ld(d[o]);
    }
    // A 16-bit dout's bias gradient is a 16-bit tensor: rounded, then accumulated.
    for (int o = o0; o < o1; ++o) dbias[o] += E::Ld(E::St(acc[o - o0]));
  });
}

void MatmulBackward32(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                      const float* weight, int N, int C, int OC, WeightLayout layout, const float* gelu_pre) {
  // The optional GELU backward on dinp's rows, applied by the thread that computed them.
  auto gelu_rows = [&](int r0, int r1) {
    if (gelu_pre == nullptr) return;
    for (int n = r0; n < r1; ++n) {
      float* d = dinp + static_cast<int64_t>(n) * C;
      const float* x = gelu_pre + static_cast<int64_t>(n) * C;
#pragma omp simd
      for (int c = 0; c < C; ++c) d[c] = vec::GeluGrad(x[c]) * d[c];
    }
  };
  if (layout == WeightLayout::kInOut) {
    // dinp (N,C) = dout (N,OC) @ W^T ; dW (C,OC) += inp^T (C,N) @ dout (N,OC)
    if (dinp != nullptr) Gemm(false, true, N, C, OC, dout, OC, weight, OC, 0.f, dinp, C, gelu_rows);
    Gemm(true, false, C, OC, N, inp, C, dout, OC, 1.f, dweight, OC);
  } else {
    // dinp (N,C) = dout (N,OC) @ W (OC,C) ; dW (OC,C) += dout^T (OC,N) @ inp (N,C)
    if (dinp != nullptr) Gemm(false, false, N, C, OC, dout, OC, weight, C, 0.f, dinp, C, gelu_rows);
    Gemm(true, false, OC, C, N, dout, OC, inp, C, 1.f, dweight, C);
  }
  if (dbias != nullptr) ColumnSums<elem::Elem<Precision::kFp32>>(dbias, dout, N, OC);
}


// ---- 16-bit inputs (kernels/cpu/gemm16.h) ----

// Runs f(r) for rows [r0, r1): on the calling thread inside a parallel region (gemm16 hands a
// thread its own rows), else over the team.
void ForRows(int r0, int r1, const std::function<void(int)>& f) {
  if (omp_in_parallel() || r1 - r0 < 32) {
    for (int r = r0; r < r1; ++r) f(r);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int r = r0; r < r1; ++r) f(r);
}

// The output (M, N) = op(A) op(B) of 16-bit A and B, finished row by row into a tensor of
// another type through an fp32 scratch of bounded size: the output is cut into blocks of
// whole rows (M >= N) or of whole columns (else); each block's fp32 values go to the scratch,
// and fin(r, c0, c1, src) finishes columns [c0, c1) of output row r from src (those fp32
// values). A block of columns re-reads all of A, a block of rows all of B: cutting the longer
// side keeps the re-reading small.
void Gemm16Blocks(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
                  Precision t, const std::function<void(int, int, int, const float*)>& fin) {
  constexpr int64_t kScratch = int64_t{1} << 22;  // floats (16 MB)
  static thread_local std::vector<float> scratch;
  if (M >= N) {
    const int rows = static_cast<int>(std::min<int64_t>(M, std::max<int64_t>(16, kScratch / std::max(N, 1) / 16 * 16)));
    scratch.resize(static_cast<size_t>(rows) * N);
    float* buf = scratch.data();  // (the team's threads see this thread's buffer through buf)
    for (int r0 = 0; r0 < M; r0 += rows) {
      const int r1 = std::min(M, r0 + rows);
      const uint16_t* a = ta ? A + r0 : A + static_cast<int64_t>(r0) * lda;
      gemm16(ta, tb, r1 - r0, N, K, a, lda, B, ldb, 0.f, buf, N, t, [&](int i0, int i1) {
        ForRows(i0, i1, [&](int i) { fin(r0 + i, 0, N, buf + static_cast<int64_t>(i) * N); });
      });
    }
  } else {
    const int cols = static_cast<int>(std::min<int64_t>(N, std::max<int64_t>(16, kScratch / std::max(M, 1) / 16 * 16)));
    scratch.resize(static_cast<size_t>(M) * cols);
    float* buf = scratch.data();
    for (int c0 = 0; c0 < N; c0 += cols) {
      const int c1 = std::min(N, c0 + cols), w = c1 - c0;
      const uint16_t* b = tb ? B + static_cast<int64_t>(c0) * ldb : B + c0;
      gemm16(ta, tb, M, w, K, A, lda, b, ldb, 0.f, buf, w, t, [&](int i0, int i1) {
        ForRows(i0, i1, [&](int i) { fin(i, c0, c1, buf + static_cast<int64_t>(i) * w); });
      });
    }
  }
}

template <typename E>
void MatmulForward16(Ptr out, CPtr inp, CPtr weight, CPtr bias, int N, int C, int OC, WeightLayout layout) {
  using T = typename E::T;
  const bool tb = layout == WeightLayout::kOutIn;
  const T* a = elem::Of<E>(inp);
  const T* w = elem::Of<E>(weight);
  const T* bs = bias ? elem::Of<E>(bias) : nullptr;
  auto finish = [&](auto eo) {
    using EO = decltype(eo);
    typename EO::T* o = elem::Of<EO>(out);
    return [o, bs, OC](int r, int c0, int c1, const float* src) {
      typename EO::T* dst = o + static_cast<int64_t>(r) * OC;
#pragma omp simd
      for (int j = c0; j < c1; ++j) dst[j] = EO::St(src[j - c0] + (bs ? E::Ld(bs[j]) : 0.f));
    };
  };
  if (out.f32()) {  // straight into the output, the bias added to finished rows
    float* o = out.as_f32();
    gemm16(false, tb, N, OC, C, a, C, w, tb ? C : OC, 0.f, o, OC, E::kType, [&](int r0, int r1) {
      if (bs == nullptr) return;
      ForRows(r0, r1, [&](int r) {
        float* dst = o + static_cast<int64_t>(r) * OC;
#pragma omp simd
        for (int j = 0; j < OC; ++j) dst[j] += E::Ld(bs[j]);
      });
    });
    return;
  }
  Gemm16Blocks(false, tb, N, OC, C, a, C, w, tb ? C : OC, E::kType, finish(E{}));
}

}  // namespace

void matmul_forward(Ptr out, CPtr inp, CPtr weight, CPtr bias, int N, int C, int OC, WeightLayout layout) {
  // inp (N,C) @ W → out (N,OC)
  if (inp.f32()) {
    MatmulForward32(out.as_f32(), inp.as_f32(), weight.as_f32(), bias.as_f32(), N, C, OC, layout);
    return;
  }
  elem::With(inp.type, [&](auto e) {
    if constexpr (decltype(e)::kType != Precision::kFp32) {
      MatmulForward16<decltype(e)>(out, inp, weight, bias, N, C, OC, layout);
    }
  });
}

void matmul_bias_gelu_forward(Ptr pre, Ptr out, CPtr inp, CPtr weight, CPtr bias, int N, int C, int OC) {
  // inp (N,C) @ W (C,OC) + bias → pre (N,OC), gelu(pre) → out (N,OC)
  if (inp.f32()) {
    MatmulBiasGeluForward32(pre.as_f32(), out.as_f32(), inp.as_f32(), weight.as_f32(), bias.as_f32(), N, C, OC);
    return;
  }
  elem::With(inp.type, [&](auto e) {
    using E = decltype(e);
    if constexpr (E::kType != Precision::kFp32) {
      using T = typename E::T;
      T* p = elem::Of<E>(pre);
      T* o = elem::Of<E>(out);
      const T* bs = elem::Of<E>(bias);
      Gemm16Blocks(false, false, N, OC, C, elem::Of<E>(inp), C, elem::Of<E>(weight), OC, E::kType,
                   [&](int r, int c0, int c1, const float* src) {
                     T* pr = p + static_cast<int64_t>(r) * OC;
                     T* orow = o + static_cast<int64_t>(r) * OC;
#pragma omp simd
                     for (int j = c0; j < c1; ++j) {
                       const T h = E::St(src[j - c0] + E::Ld(bs[j]));
                       pr[j] = h;
                       orow[j] = E::St(vec::Gelu(E::Ld(h)));
                     }
                   });
    }
  });
}

void matmul_backward(Ptr dinp, float* dweight, float* dbias, CPtr dout, CPtr inp, CPtr weight, int N, int C, int OC,
                     WeightLayout layout, CPtr gelu_pre, float* gelu_dbias) {
  if (gelu_dbias != nullptr && dinp) {  // dinp, then its column sums, as dbias takes dout's
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, layout, gelu_pre, nullptr);
    elem::With(dinp.type, [&](auto e) {
      using E = decltype(e);
      ColumnSums<E>(gelu_dbias, elem::Of<E>(dinp), N, C);
    });
    return;
  }
  if (dout.f32()) {
    MatmulBackward32(dinp.as_f32(), dweight, dbias, dout.as_f32(), inp.as_f32(), weight.as_f32(), N, C, OC, layout,
                     gelu_pre.as_f32());
    return;
  }
  elem::With(dout.type, [&](auto e) {
    using E = decltype(e);
    if constexpr (E::kType != Precision::kFp32) {
      using T = typename E::T;
      const T* dy = elem::Of<E>(dout);
      const T* x = elem::Of<E>(inp);
      const T* w = elem::Of<E>(weight);
      const T* gp = gelu_pre ? elem::Of<E>(gelu_pre) : nullptr;
      // dinp (N,C) = dout (N,OC) @ W^T (kInOut, W (C,OC)) or dout @ W (kOutIn, W (OC,C)).
      const bool tb = layout == WeightLayout::kInOut;
      const int ldw = tb ? OC : C;
      if (dinp && dinp.f32()) {
        float* d = dinp.as_f32();
        gemm16(false, tb, N, C, OC, dy, OC, w, ldw, 0.f, d, C, E::kType, [&](int r0, int r1) {
          if (gp == nullptr) return;
          ForRows(r0, r1, [&](int r) {
            float* row = d + static_cast<int64_t>(r) * C;
            const T* g = gp + static_cast<int64_t>(r) * C;
#pragma omp simd
            for (int c = 0; c < C; ++c) row[c] = vec::GeluGrad(E::Ld(g[c])) * row[c];
          });
        });
      } else if (dinp) {
        T* d = elem::Of<E>(dinp);
        Gemm16Blocks(false, tb, N, C, OC, dy, OC, w, ldw, E::kType, [&](int r, int c0, int c1, const float* src) {
          T* row = d + static_cast<int64_t>(r) * C;
          if (gp == nullptr) {
#pragma omp simd
            for (int c = c0; c < c1; ++c) row[c] = E::St(src[c - c0]);
            return;
          }
          const T* g = gp + static_cast<int64_t>(r) * C;
#pragma omp simd
          for (int c = c0; c < c1; ++c) row[c] = E::St(vec::GeluGrad(E::Ld(g[c])) * E::Ld(E::St(src[c - c0])));
        });
      }
      // dW += round(inp^T dout) (kInOut: (C,OC)) or round(dout^T inp) (kOutIn: (OC,C)): this
      // call's weight gradient is a 16-bit tensor, accumulated in fp32.
      const int wcols = layout == WeightLayout::kInOut ? OC : C;
      auto accumulate = [&](int r, int c0, int c1, const float* src) {
        float* row = dweight + static_cast<int64_t>(r) * wcols;
#pragma omp simd
        for (int c = c0; c < c1; ++c) row[c] += E::Ld(E::St(src[c - c0]));
      };
      if (layout == WeightLayout::kInOut) {
        Gemm16Blocks(true, false, C, OC, N, x, C, dy, OC, E::kType, accumulate);
      } else {
        Gemm16Blocks(true, false, OC, C, N, dy, OC, x, C, E::kType, accumulate);
      }
      if (dbias != nullptr) ColumnSums<E>(dbias, dy, N, OC);
    }
  });
}

}  // namespace gantry::kernels
