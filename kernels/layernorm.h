// LayerNorm over the last dimension (eps 1e-5, as GPT-2).
#pragma once

#include "kernels/types.h"

namespace gantry::kernels {

constexpr float kLayerNormEps = 1e-5f;

// inp (N,C), weight (C), bias (C) → out (N,C) (fp32, or rounded to 16 bits), mean (N), rstd (N)
void layernorm_forward(Ptr out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int N, int C);
// The residual add fused with the LayerNorm that follows it: a (N,C), b (N,C) → residual (N,C)
// = a + b, then out, mean, rstd as layernorm_forward(out, mean, rstd, residual, ...) gives them,
// bit for bit (residual may be a or b).
void residual_layernorm_forward(float* residual, Ptr out, float* mean, float* rstd, const float* a,
                                const float* b, const float* weight, const float* bias, int N, int C);

// dout (N,C; fp32 or 16-bit, read exactly), inp (N,C), weight (C), mean (N), rstd (N)
//   → dinp (N,C) +=, dweight (C) +=, dbias (C) +=, and where dinp16 is given, dinp16 (N,C, 16-bit)
// = dinp's new values rounded (RoundTo's bits: the residual gradient's copy for the GEMMs).
// dinp accumulates (the residual stream's gradient is added to). Deterministic and
// independent of the thread count; a 16-bit dout gives the bits of its values widened to fp32.
void layernorm_backward(float* dinp, float* dweight, float* dbias, CPtr dout,
                        const float* inp, const float* weight, const float* mean,
                        const float* rstd, int N, int C, Ptr dinp16 = nullptr);

}  // namespace gantry::kernels
