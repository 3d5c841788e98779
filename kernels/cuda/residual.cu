// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
// The residual add on the GPU, forward and backward, the twins of kernels/cpu/residual.cc.
#include "kernels/cuda/ns.h"

#include "common/status.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elem.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/ops.h"

namespace gantry::GANTRY_CUDA_NS {
namespace {

__global__ void ResidualForwardKernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
// The same, 4 elements a thread (16-byte loads and stores): n4 = n / 4, every pointer 16-byte
// aligned.
__global__ void ResidualForward4Kernel(float* out, const float* a, const float* b, int64_t n4) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  float x[4], y[4];
  LoadF4(a + 4 * i, x);
  LoadF4(b + 4 * i, y);
  for (int k = 0; k < 4; ++k) x[k] += y[k];
  StoreF4(out + 4 * i, x);
}

__global__ void ResidualBackwardKernel(float* da, float* db, const float* dout, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  da[i] += dout[i];
  db[i] += dout[i];
}

}  // namespace

absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t N, cudaStream_t stream) {
  if (N % 4 == 0 && (reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(a) |
                     reinterpret_cast<uintptr_t>(b)) % 16 == 0) {
    return Elementwise(ResidualForward4Kernel, N / 4, stream, out, a, b);
  }
  return Elementwise(ResidualForwardKernel, N, stream, out, a, b);
}

absl::Status ResidualBackward(float* da, float* db, const float* dout, int64_t N, cudaStream_t stream) {
  return Elementwise(ResidualBackwardKernel, N, stream, da, db, dout);
}

}  // namespace gantry::GANTRY_CUDA_NS
