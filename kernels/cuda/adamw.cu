#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace gantry::cuda {
namespace {

__global__ void AdamWKernel(float* params, const float* grads, float* m, float* v, int64_t n,
                            float beta1, float beta2, float eps, float step_size,
                            float bc2_sqrt, float decay) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grads[i];
  const float mi = beta1 * m[i] + (1.0f - beta1) * g;
  const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  const float denom = sqrtf(vi) / bc2_sqrt + eps;
  params[i] = params[i] * decay - step_size * mi / denom;
}

}  // namespace

absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t N,
                         const kernels::AdamWParams& hp, cudaStream_t stream) {
  if (N < 0 || hp.step < 1) return absl::InvalidArgumentError("AdamWUpdate: bad N or step");
  if (N == 0) return absl::OkStatus();
  const float bc1 = 1.0f - std::pow(hp.beta1, static_cast<float>(hp.step));
  const float bc2 = 1.0f - std::pow(hp.beta2, static_cast<float>(hp.step));
  constexpr int kBlock = 256;
  AdamWKernel<<<static_cast<unsigned>((N + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
      params, grads, m, v, N, hp.beta1, hp.beta2, hp.eps, hp.lr / bc1, std::sqrt(bc2),
      1.0f - hp.lr * hp.weight_decay);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::cuda
