#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/ns.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace gantry::GANTRY_CUDA_NS {

absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t N,
                         const kernels::AdamWParams& hp, cudaStream_t stream) {
  if (N < 0 || hp.step < 1) return absl::InvalidArgumentError("AdamWUpdate: bad N or step");
  if (N == 0) return absl::OkStatus();
  const AdamWScalars k = AdamWScalarsOf(hp);
  constexpr int kBlock = 256;
  GANTRY_LAUNCH(AdamWKernel, static_cast<unsigned>((N + kBlock - 1) / kBlock), kBlock, 0, stream)(
      params, grads, m, v, N, hp.beta1, hp.beta2, hp.eps, k.step_size, k.bc2_sqrt, k.decay, hp.grad_scale);
  GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
