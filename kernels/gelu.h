// GELU, tanh approximation (GPT-2's "gelu_new").
#pragma once
#include <cstdint>

namespace gantry::kernels {

// inp (N) → out (N); may alias.
void gelu_forward(float* out, const float* inp, int64_t N);
// inp (N), dout (N) → dinp (N) = dout * gelu'(inp) (overwritten; may alias dout).
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t N);

}  // namespace gantry::kernels
