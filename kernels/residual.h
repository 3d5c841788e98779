// Residual add.
#pragma once
#include <cstdint>

namespace gantry::kernels {

// a (N), b (N) → out (N) = a + b
void residual_forward(float* out, const float* a, const float* b, int64_t N);
// dout (N) → da (N) +=, db (N) +=
void residual_backward(float* da, float* db, const float* dout, int64_t N);

}  // namespace gantry::kernels
