// CUDA twins of the CPU ops in kernels/*.h. Pointers are device pointers; each launcher
// checks its arguments and the launch and returns a Status. The CPU versions are the
// reference: tests/gpu compares each against its CPU twin.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/adamw.h"

namespace gantry::cuda {

// inp (N) → out (N), GELU tanh form
absl::Status GeluForward(float* out, const float* inp, int64_t N, cudaStream_t stream);
// inp (N), dout (N) → dinp (N)
absl::Status GeluBackward(float* dinp, const float* inp, const float* dout, int64_t N,
                          cudaStream_t stream);
// a (N), b (N) → out (N)
absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t N,
                             cudaStream_t stream);
// params, grads, m, v (N) → updated in place (fp32)
absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t N,
                         const kernels::AdamWParams& hp, cudaStream_t stream);

}  // namespace gantry::cuda
