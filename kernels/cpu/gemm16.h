#pragma once
#include <cstdint>
#include <functional>
#include "kernels/cast.h"
namespace gantry::kernels {
// C (M,N) fp32 = op(A) op(B) + beta * C, row-major like cblas (lda/ldb/ldc in elements; ta/tb:
// A is stored (K,M) / B is stored (N,K)). A and B hold 16-bit values of type t (kBf16: bf16 bits; kFp16: IEEE
// half bits), as uint16_t. Every product of two 16-bit values is exact in fp32, sums are fp32. after(r0, r1),
// when given, is called once for every block of output rows [r0, r1) after those rows are final; every row is
// covered exactly once. The result does not depend on the thread count. Call from outside OpenMP parallel regions.
void gemm16(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
            float beta, float* C, int ldc, Precision t, const std::function<void(int, int)>& after = nullptr);
// Which path gemm16 takes on this CPU for type t.
const char* gemm16_path(Precision t);
}  // namespace gantry::kernels
