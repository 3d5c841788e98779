// namespace gantry::cuda (gantry::cuda_emulated in the cuda-emulated build): GANTRY_CUDA_NS, kernels/cuda/ns.h
#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/ns.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/ops.h"

namespace gantry::GANTRY_CUDA_NS {

absl::Status AdamWUpdate(float* params, const float* grads, float* m, float* v, int64_t N,
                         const kernels::AdamWParams& hp, cudaStream_t stream) {
  const kernels::AdamWSpan span{params, grads, m, v, N, hp.weight_decay, nullptr};
  return AdamWSpans(&span, 1, hp, stream);
}

absl::Status AdamWSpans(const kernels::AdamWSpan* spans, int count, const kernels::AdamWParams& hp,
                        cudaStream_t stream) {
  if (count < 0 || hp.step < 1) return absl::InvalidArgumentError("AdamWSpans: bad count or step");
  const AdamWScalars k = AdamWScalarsOf(hp);
  constexpr int kBlock = 256;
  for (int first = 0; first < count;) {
    AdamWBatch b{};
    uint64_t blocks = 0;
    kernels::Precision type = kernels::Precision::kFp32;
    while (first < count && b.count < kAdamWBatch) {
      const kernels::AdamWSpan& s = spans[first];
      if (s.n < 0) return absl::InvalidArgumentError("AdamWSpans: a negative length");
      if (s.working) {  // one 16-bit type a launch
        if (type != kernels::Precision::kFp32 && s.working.type != type) break;
        type = s.working.type;
        if (type == kernels::Precision::kFp32) return absl::InvalidArgumentError("AdamWSpans: an fp32 working copy");
      }
      const uint64_t span_blocks = (static_cast<uint64_t>(s.n) + kBlock - 1) / kBlock;
      if (blocks + span_blocks > 0x7fffffffu) {
        if (b.count == 0) return absl::InvalidArgumentError("AdamWSpans: a span over 2^31 blocks");
        break;
      }
      const int j = b.count++;
      b.params[j] = s.params;
      b.grads[j] = s.grads;
      b.m[j] = s.m;
      b.v[j] = s.v;
      b.working[j] = s.working ? s.working.as_16() : nullptr;
      b.n[j] = s.n;
      b.decay[j] = 1.0f - hp.lr * s.weight_decay;  // AdamWScalarsOf's decay, the span's
      b.first_block[j] = static_cast<uint32_t>(blocks);
      blocks += span_blocks;
      ++first;
    }
    b.first_block[b.count] = static_cast<uint32_t>(blocks);
    b.working_bits = type == kernels::Precision::kFp16 ? 10 : 16;
    if (blocks == 0) continue;
    GANTRY_LAUNCH(AdamWSpansKernel, static_cast<unsigned>(blocks), kBlock, 0, stream)(
        b, hp.beta1, hp.beta2, hp.eps, k.step_size, k.bc2_sqrt, hp.grad_scale);
    GPU_RETURN_IF_ERROR(cudaGetLastError());
  }
  return absl::OkStatus();
}

}  // namespace gantry::GANTRY_CUDA_NS
