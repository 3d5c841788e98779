#include "kernels/matmul.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>

namespace gantry::kernels {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC, WeightLayout layout) {
  // inp (N,C) @ W → out (N,OC); the bias is written first and the product added (beta 1).
  float beta = 0.f;
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      std::copy(bias, bias + OC, out + static_cast<int64_t>(n) * OC);
    }
    beta = 1.f;
  }
  if (layout == WeightLayout::kInOut) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OC, C, 1.f, inp, C, weight, OC,
                beta, out, OC);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.f, inp, C, weight, C,
                beta, out, OC);
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC,
                     WeightLayout layout) {
  if (layout == WeightLayout::kInOut) {
    // dinp (N,C) = dout (N,OC) @ W^T ; dW (C,OC) += inp^T (C,N) @ dout (N,OC)
    if (dinp != nullptr) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, C, OC, 1.f, dout, OC, weight, OC,
                  0.f, dinp, C);
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, OC, N, 1.f, inp, C, dout, OC, 1.f,
                dweight, OC);
  } else {
    // dinp (N,C) = dout (N,OC) @ W (OC,C) ; dW (OC,C) += dout^T (OC,N) @ inp (N,C)
    if (dinp != nullptr) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.f, dout, OC, weight, C,
                  0.f, dinp, C);
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.f, dout, OC, inp, C, 1.f,
                dweight, C);
  }
  if (dbias != nullptr) {
    // Column sums in row order, columns split over threads: deterministic.
    constexpr int kCols = 64;
    const int nblocks = (OC + kCols - 1) / kCols;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; ++blk) {
      const int o0 = blk * kCols;
      const int o1 = std::min(OC, o0 + kCols);
      float acc[kCols] = {0};
      for (int n = 0; n < N; ++n) {
        const float* d = dout + static_cast<int64_t>(n) * OC;
        for (int o = o0; o < o1; ++o) acc[o - o0] += d[o];
      }
      for (int o = o0; o < o1; ++o) dbias[o] += acc[o - o0];
    }
  }
}

}  // namespace gantry::kernels
