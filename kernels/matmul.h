// Matmul with bias through the BLAS (OpenBLAS sgemm; docs/perf/cpu.md has the choice).
#pragma once

#include "kernels/types.h"

namespace gantry::kernels {

// Element types (kernels/types.h): the inputs (inp, weight, bias; dout, inp, weight, gelu_pre)
// all fp32, or all of one 16-bit type; then every product is exact in fp32 and sums are fp32
// (kernels/cpu/gemm16.h), and an output may be fp32 or of that type (rounded). dweight and dbias
// are fp32 accumulators; with 16-bit inputs the gradients a call adds to them are rounded to
// the type first (autocast's 16-bit weight gradients, accumulated in fp32).

// inp (N,C), weight (C,OC) or (OC,C), bias (OC) or null → out (N,OC)
void matmul_forward(Ptr out, CPtr inp, CPtr weight, CPtr bias, int N, int C, int OC,
                    WeightLayout layout = WeightLayout::kInOut);

// Fused with GELU (the MLP's first projection): inp (N,C), weight (C,OC), bias (OC)
//   → pre (N,OC) = inp @ W + bias, out (N,OC) = gelu(pre)
// Same bits as matmul_forward followed by gelu_forward, one pass fewer over memory (16-bit:
// pre rounded, gelu of the rounded pre rounded).
void matmul_bias_gelu_forward(Ptr pre, Ptr out, CPtr inp, CPtr weight, CPtr bias, int N, int C, int OC);

// dout (N,OC), inp (N,C), weight → dinp (N,C) = (overwritten; skipped if null),
//   dweight +=, dbias (OC) += (skipped if null)
// If gelu_pre (N,C) is given, dinp is multiplied by gelu'(gelu_pre): the backward of a GELU
// that produced inp, fused (same bits as gelu_backward after it; a 16-bit dinp is rounded
// before and after that product). gelu_dbias (C) += dinp's column sums as dbias takes dout's
// (skipped if null): the bias gradient of the layer that produced gelu_pre.
void matmul_backward(Ptr dinp, float* dweight, float* dbias, CPtr dout, CPtr inp, CPtr weight, int N, int C, int OC,
                     WeightLayout layout = WeightLayout::kInOut, CPtr gelu_pre = nullptr, float* gelu_dbias = nullptr);

}  // namespace gantry::kernels
