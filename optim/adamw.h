// AdamW over a model's flat parameters: fp32 state m and v, decay on tensors of 2+ dims. The
// state lives on a backend (the model's: its device memory), and the update runs there.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/backend.h"
#include "jobspec/job_spec.h"
#include "jobspec/model_layout.h"
#include "optim/shard_segment.h"

namespace gantry::optim {

// The AdamW of a job spec's train section.
inline kernels::AdamWConfig AdamWOf(const jobspec::TrainSpec& t) { return {t.beta1, t.beta2, t.eps, t.weight_decay}; }
// train.precision as the model's working precision.
inline kernels::Precision PrecisionOf(const jobspec::TrainSpec& t) {
  return t.precision == "bf16"   ? kernels::Precision::kBf16
         : t.precision == "fp16" ? kernels::Precision::kFp16
                                 : kernels::Precision::kFp32;
}

class AdamW {
 public:
  // State for the whole flat buffer, on backend (the cpu backend by default).
  AdamW(const std::vector<jobspec::ParamTensor>& tensors, size_t num_params, kernels::AdamWConfig config,
        kernels::Backend* backend = &kernels::CpuBackend());
  // State for the segments a ZeRO rank owns; local_size is the size of its compact buffers.
  AdamW(const std::vector<jobspec::ParamTensor>& tensors, const std::vector<ShardSegment>& segments,
        size_t local_size, kernels::AdamWConfig config, kernels::Backend* backend = &kernels::CpuBackend());

  // How a buffer is indexed: as the whole flat buffer, or compact like m and v.
  enum class Index { kFlat, kLocal };
  // One update with learning rate lr; step is 1-based. ZeRO 1 passes flat parameters and
  // gradients (its shard of the gradients is reduced in place), ZeRO 2 flat parameters and
  // compact gradients, ZeRO 3 both compact. All in the backend's memory; queued there.
  // local_begin/local_end: only the elements whose compact index is in that range (the
  // offloaded optimizer steps its shard a chunk at a time, between the chunks' copies).
  // grad_scale: null, or the gradients' multiplier in the backend's memory
  // (AdamWParams::grad_scale: the clip computed on the device). working: null, or where flat
  // ranges of the updated parameters go as a 16-bit working copy (sorted, apart), written in
  // the same pass. One Backend::AdamWSpans call for the whole step.
  void Step(float* params, Index pindex, const float* grads, Index gindex, double lr, int step,
            size_t local_begin = 0, size_t local_end = static_cast<size_t>(-1), const float* grad_scale = nullptr,
            const std::vector<kernels::WorkingCopyRange>* working = nullptr);
  void Step(float* params, const float* grads, double lr, int step) {
    Step(params, Index::kFlat, grads, Index::kFlat, lr, step);
  }

  const std::vector<ShardSegment>& segments() const { return segments_; }
  // The state, in the backend's memory (host code may touch it where the backend is host
  // addressable).
  kernels::DeviceBuffer& m() { return m_; }
  kernels::DeviceBuffer& v() { return v_; }
  const kernels::DeviceBuffer& m() const { return m_; }
  const kernels::DeviceBuffer& v() const { return v_; }
  kernels::Backend& backend() const { return *backend_; }

 private:
  struct Range {
    size_t flat_begin, flat_end, local;
    bool decay;
  };
  kernels::AdamWConfig config_;
  kernels::Backend* backend_;
  std::vector<ShardSegment> segments_;
  std::vector<Range> ranges_;  // the segments cut at tensor boundaries, each with its decay flag
  kernels::DeviceBuffer m_, v_;
  std::vector<kernels::AdamWSpan> spans_;  // Step's, kept for their room
};

}  // namespace gantry::optim
