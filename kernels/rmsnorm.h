// RMSNorm, as Hugging Face's LlamaRMSNorm runs it. CPU reference in kernels/cpu/rmsnorm.cc, checked against PyTorch (tests/reference/make_fixtures.py --only
// llama_ops); deterministic and independent of the thread count.
#pragma once

#include <cstdint>

#include "kernels/types.h"

namespace gantry::kernels {

// RMSNorm: out = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps), per row.
// inp (N,C), weight (C) → out (N,C) (fp32, or rounded to 16 bits), rstd (N)
void rmsnorm_forward(Ptr out, float* rstd, const float* inp, const float* weight, int N, int C, float eps);
// The residual add fused with the RMSNorm that follows it: a (N,C), b (N,C) → residual (N,C) =
// a + b, then out, rstd as rmsnorm_forward gives them from residual, bit for bit.
void residual_rmsnorm_forward(float* residual, Ptr out, float* rstd, const float* a, const float* b,
                              const float* weight, int N, int C, float eps);
// dout (N,C; fp32 or 16-bit, read exactly), inp, weight, rstd → dinp (N,C) +=, dweight (C) +=
// (rows summed in order), and where dinp16 is given, dinp16 = dinp's new values rounded
// (layernorm_backward's contract).
void rmsnorm_backward(float* dinp, float* dweight, CPtr dout, const float* inp, const float* weight,
                      const float* rstd, int N, int C, Ptr dinp16 = nullptr);

}  // namespace gantry::kernels
