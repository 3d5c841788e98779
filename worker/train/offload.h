// ZeRO-Offload's host side (optimizer.offload: cpu): a rank's fp32 master pieces and the
// staging of their gradients in the backend's host memory (pinned on cuda), the two streams
// that move them, and the step's pipeline: every chunk's gradients are queued down at once;
// as each arrives the host runs AdamW over it (the cpu backend's kernel) and queues its
// parameters up, so the copies of the other chunks overlap the host's work.
//
// The engine (zero.h) owns one when the optimizer is offloaded, and the AdamW whose state
// lives on the host; this class owns the host buffers and the streams, nothing else.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "optim/adamw.h"

namespace gantry::train {

class HostOffload {
 public:
  // The rank's pieces `own` (flat range, compact offset), local_size floats in all, on `be`
  // (the model's backend). RESOURCE_EXHAUSTED when the host memory cannot be had.
  static absl::StatusOr<std::unique_ptr<HostOffload>> Create(kernels::Backend* be, std::vector<optim::ShardSegment> own,
                                                             size_t local_size);
  ~HostOffload();
  HostOffload(const HostOffload&) = delete;
  HostOffload& operator=(const HostOffload&) = delete;

  // The master pieces (compact, host memory): what a checkpoint writes, and ZeRO 3's
  // parameter shard when the parameters are offloaded too.
  float* master() { return master_.data(); }
  // Host bytes of the master pieces and the gradient staging.
  size_t host_bytes() const { return (master_.size() + grads_.size()) * sizeof(float); }
  // The pipeline's chunk, in floats (tests make it small).
  void set_chunk(size_t floats) { chunk_ = std::max<size_t>(floats, 1); }

  // Takes the master pieces from the model's flat parameters (device memory), as loaded.
  void LoadMaster(const float* params);
  // One step: the reduced, clipped gradient pieces (flat-indexed when grads_flat, else
  // compact) go down, `opt` steps the master pieces on the host, and the updated pieces go up
  // into params (flat-indexed when params_flat, else compact; null: nowhere, the master is the
  // shard). Waits for the gradients' writers on the backend's stream first, and for the
  // copies up before it returns. Returns the bytes moved.
  absl::StatusOr<size_t> Step(optim::AdamW& opt, const float* grads, bool grads_flat, float* params, bool params_flat,
                              double lr, int step);

 private:
  HostOffload(kernels::Backend* be, std::vector<optim::ShardSegment> own, size_t local_size)
      : be_(be), own_(std::move(own)), local_size_(local_size) {}
  // Runs f(flat begin, compact begin, length) for the parts of the pieces in compact [c0, c1).
  template <typename F>
  void Parts(size_t c0, size_t c1, F&& f) const;

  kernels::Backend* be_;
  const std::vector<optim::ShardSegment> own_;
  const size_t local_size_;
  kernels::DeviceBuffer master_, grads_;
  kernels::Backend::Stream down_ = nullptr, up_ = nullptr;
  size_t chunk_ = size_t{1} << 22;  // floats (16 MB)
};

}  // namespace gantry::train
