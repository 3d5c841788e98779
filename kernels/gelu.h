// GELU, tanh approximation (GPT-2's "gelu_new").
#pragma once

#include <cstdint>

#include "kernels/types.h"

namespace gantry::kernels {

// inp (N) → out (N); may alias. All fp32, or all of one 16-bit type (out rounded).
void gelu_forward(Ptr out, CPtr inp, int64_t N);

// inp (N), dout (N) → dinp (N) = dout * gelu'(inp) (overwritten; may alias dout). All fp32,
// or all of one 16-bit type (dinp rounded).
void gelu_backward(Ptr dinp, CPtr inp, CPtr dout, int64_t N);

}  // namespace gantry::kernels
