// Token + position embedding.
#pragma once
#include <cstdint>

namespace gantry::kernels {

// inp (B,T) token ids, wte (V,C), wpe (maxT,C) → out (B,T,C) = wte[inp] + wpe[t]
void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe,
                     int B, int T, int C);

// dout (B,T,C), inp (B,T) → dwte (V,C) +=, dwpe (maxT,C) +=
// Deterministic: each thread owns whole columns, rows are summed in (b, t) order.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                      int B, int T, int C);

}  // namespace gantry::kernels
