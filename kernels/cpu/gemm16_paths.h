// Each path of gemm16 (kernels/cpu/gemm16.h) on its own, for tests and benchmarks that compare
// them on one machine. The model calls gemm16, which picks one of these once per process.
#pragma once

#include <cstdint>
#include <functional>

#include "kernels/cast.h"

namespace gantry::kernels {

// Whether gemm16_native can run here: this CPU has AVX512_BF16 (cpuid, with the OS saving the
// AVX-512 state) and t is kBf16. fp16 has no native path (no AVX512_FP16 on the CPUs we target).
bool gemm16_native_supported(Precision t);

// Why gemm16_native cannot run here ("" when it can), for test skips and logs.
const char* gemm16_native_unsupported_reason(Precision t);

// The AVX512_BF16 kernel: same contract as gemm16. Requires gemm16_native_supported(t).
// VDPBF16PS treats bf16 subnormal inputs as zero and flushes subnormal fp32 results to zero
// (whatever MXCSR says), so outputs below 2^-126 in magnitude become 0 on this path.
void gemm16_native(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda,
                   const uint16_t* B, int ldb, float beta, float* C, int ldc, Precision t,
                   const std::function<void(int, int)>& after = nullptr);

// Widen A and B to fp32 (F16C for fp16, a shift for bf16), then per-thread slices of
// single-threaded cblas_sgemm, as kernels/cpu/matmul.cc does for fp32. Any x86-64-v3 CPU.
// wide_floats: the fp32 room of a K-chunk of the operand the blocks share (0: the path's own,
// 16 MB); tests make it small to cut K into many chunks.
void gemm16_convert(bool ta, bool tb, int M, int N, int K, const uint16_t* A, int lda,
                    const uint16_t* B, int ldb, float beta, float* C, int ldc, Precision t,
                    const std::function<void(int, int)>& after = nullptr, int64_t wide_floats = 0);

}  // namespace gantry::kernels
