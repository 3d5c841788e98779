// Placeholder until the measured implementation lands (branch gemm16): widen to fp32, sgemm.
#include "kernels/cpu/gemm16.h"

#include <cblas.h>

#include <vector>

#include "kernels/dtype.h"

namespace gantry::kernels {

void gemm16(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
            float beta, float* C, int ldc, Precision t, const std::function<void(int, int)>& after) {
  const int arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
  std::vector<float> a(static_cast<size_t>(arows - 1) * lda + acols), b(static_cast<size_t>(brows - 1) * ldb + bcols);
  convert(a.data(), CPtr(A, t), static_cast<int64_t>(a.size()));
  convert(b.data(), CPtr(B, t), static_cast<int64_t>(b.size()));
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, 1.f, a.data(),
              lda, b.data(), ldb, beta, C, ldc);
  if (after) after(0, M);
}

const char* gemm16_path(Precision) { return "convert+sgemm"; }

}  // namespace gantry::kernels
