// GEMMs over 16-bit inputs (bf16 or fp16) with fp32 sums and an fp32 output, the CPU twin of
// cuBLAS's 16-bit GEMMs with CUBLAS_COMPUTE_32F. Two paths (docs/perf/cpu.md, "bf16 GEMM on the
// CPU (issue 20)" has the measurements that chose them):
//   - bf16 on a CPU with AVX512_BF16 (AMX CPUs have it too): our own VDPBF16PS kernel
//     (kernels/cpu/gemm16.cc). VDPBF16PS treats subnormal inputs as 0 and flushes subnormal
//     results to 0, so on this path |values| below 2^-126 become 0 (the widening path keeps
//     them); nothing else differs beyond fp32 summation order.
//   - everything else (fp16 everywhere, bf16 on AVX2-only CPUs): the 16-bit operands are
//     widened to fp32 and single-threaded sgemm runs on blocks of the output that depend on
//     the shape only, shared out over the OpenMP threads.
// GANTRY_GEMM16=convert in the environment (read once) forces the second path. Each path alone
// is in kernels/cpu/gemm16_paths.h (tests, benchmarks).
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/cast.h"  // enum class Precision { kFp32, kBf16, kFp16 }; Bf16Of/FloatOfBf16, RoundToFp16

namespace gantry::kernels {

// C (M,N) fp32 = op(A) op(B) + beta * C, row-major like cblas (lda/ldb/ldc in elements; ta/tb:
// A is stored (K,M) / B is stored (N,K)). A and B hold 16-bit values of type t (kBf16: bf16 bits; kFp16: IEEE
// half bits), as uint16_t. Every product of two 16-bit values is exact in fp32, sums are fp32 (what cuBLAS's
// 16-bit GEMMs with CUBLAS_COMPUTE_32F do). after(r0, r1), when given, is called once for every block of
// output rows [r0, r1) after those rows are final (on the thread that computed them when the output is
// split by rows, so the rows are still in cache); every row is covered exactly once. The result must not
// depend on the thread count (each output element computed by one call/tile with a fixed K order).
// Call from outside OpenMP parallel regions (it uses the process's OpenMP threads: omp_get_max_threads()).
void gemm16(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B, int ldb,
            float beta, float* C, int ldc, Precision t, const std::function<void(int, int)>& after = nullptr);

// Which path gemm16 takes on this CPU for type t, for logs and benchmarks: e.g. "onednn avx512_core_bf16",
// "own avx512_bf16", "convert+sgemm".
const char* gemm16_path(Precision t);

}  // namespace gantry::kernels
