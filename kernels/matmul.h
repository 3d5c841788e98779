// Matmul with bias through the BLAS (OpenBLAS sgemm; docs/perf.md has the choice).
#pragma once

namespace gantry::kernels {

// Weight layouts: kInOut is Hugging Face GPT-2's Conv1D layout, weight (C, OC), out = inp @ W.
// kOutIn is torch.nn.Linear's and the tied embedding's, weight (OC, C), out = inp @ W^T.
enum class WeightLayout { kInOut, kOutIn };

// inp (N,C), weight (C,OC) or (OC,C), bias (OC) or null → out (N,OC)
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int N, int C, int OC, WeightLayout layout = WeightLayout::kInOut);

// Fused with GELU (the MLP's first projection): inp (N,C), weight (C,OC), bias (OC)
//   → pre (N,OC) = inp @ W + bias, out (N,OC) = gelu(pre)
// Same bits as matmul_forward followed by gelu_forward, one pass fewer over memory.
void matmul_bias_gelu_forward(float* pre, float* out, const float* inp, const float* weight,
                              const float* bias, int N, int C, int OC);

// dout (N,OC), inp (N,C), weight → dinp (N,C) = (overwritten; skipped if null),
//   dweight +=, dbias (OC) += (skipped if null)
// If gelu_pre (N,C) is given, dinp is multiplied by gelu'(gelu_pre): the backward of a GELU
// that produced inp, fused (same bits as gelu_backward after it).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                     const float* inp, const float* weight, int N, int C, int OC,
                     WeightLayout layout = WeightLayout::kInOut, const float* gelu_pre = nullptr);

}  // namespace gantry::kernels
