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

// Vocabulary-parallel (a tensor-parallel rank holds wte rows [v_begin, v_end); wte points
// at row v_begin): tokens outside the range contribute nothing, and wpe may be null (one
// rank adds the positions, the group's all-reduce sums the rest). dwpe may be null.
void encoder_forward_shard(float* out, const int32_t* inp, const float* wte, int v_begin, int v_end,
                           const float* wpe, int B, int T, int C);
void encoder_backward_shard(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int v_begin,
                            int v_end, int B, int T, int C);

}  // namespace gantry::kernels
