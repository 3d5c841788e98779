#include "kernels/matmul.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/column_blocks.h"
#include "kernels/cpu/vec_math.h"

namespace gantry::kernels {
namespace {

// C (M,N) = op(A) op(B) + beta C, row-major. The output is split into one block of rows (or
// of columns, whichever dimension is larger) per thread of our own OpenMP team, and each
// thread runs a single-threaded sgemm on its block (OpenBLAS's OpenMP build does not fork
// inside a parallel region). Keeping every thread in one team matters: when OpenBLAS forked
// its own team right after one of ours, the idle-spinning threads cost each GEMM 30-60%
// (docs/perf.md). Each output element is computed by one call, so results do not depend on
// the thread count. `after(r0, r1)` runs on the thread that computed rows [r0, r1) (row
// split only), while those rows are still in cache.
template <typename After>
void Gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc, After&& after) {
  const CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE TB = tb ? CblasTrans : CblasNoTrans;
  const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t work = static_cast<int64_t>(M) * N * K;
  if (nt == 1 || work < (int64_t{1} << 18)) {
    cblas_sgemm(CblasRowMajor, TA, TB, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
    after(0, M);
    return;
  }
  const bool split_rows = M >= N;
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    const int n = omp_get_num_threads();
    const int total = split_rows ? M : N;
    // Block edges on multiples of 16 (whole cache lines of the output).
    auto edge = [&](int i) { return i == n ? total : std::min(total, (total * i / n) & ~15); };
    const int i0 = edge(t), i1 = edge(t + 1);
    if (i1 > i0) {
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
  }
  if (!split_rows) after(0, M);
}

void Gemm(bool ta, bool tb, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc) {
  Gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, [](int, int) {});
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC, WeightLayout layout) {
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

void matmul_bias_gelu_forward(float* pre, float* out, const float* inp, const float* weight,
                              const float* bias, int N, int C, int OC) {
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

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC,
                     WeightLayout layout, const float* gelu_pre) {
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
  if (dbias != nullptr) {
    constexpr int kCols = 64;
    ParallelColumnBlocks<kCols>(OC, [&](int o0, int o1) {
      float acc[kCols] = {0};
      for (int n = 0; n < N; ++n) {
        const float* d = dout + static_cast<int64_t>(n) * OC;
        for (int o = o0; o < o1; ++o) acc[o - o0] += d[o];
      }
      for (int o = o0; o < o1; ++o) dbias[o] += acc[o - o0];
    });
  }
}

}  // namespace gantry::kernels
