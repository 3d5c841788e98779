// The SwiGLU MLP's gate (Llama). CPU reference in kernels/cpu/swiglu.cc, checked against PyTorch (tests/reference/make_fixtures.py --only
// llama_ops); deterministic and independent of the thread count.
#pragma once

#include <cstdint>

#include "kernels/types.h"

namespace gantry::kernels {

// SwiGLU's gate: h = silu(g) * u, gu rows (N, 2F) = [g | u] → h (N, F).
void swiglu_forward(Ptr h, CPtr gu, int N, int F);
// dh (N,F), gu (N,2F) → dgu (N,2F) overwritten: [dh * u * silu'(g) | dh * silu(g)]
void swiglu_backward(Ptr dgu, CPtr dh, CPtr gu, int N, int F);

}  // namespace gantry::kernels
