// Where a training step runs. "cpu" is the host loop (model::GPT with ZeroEngine). One rank
// on an accelerator ("cuda:N", "cuda-emulated:N") is a DeviceModel: the same GPT on that
// backend, with AdamW's state and update beside it, its buffers allocated at Create so that
// a step allocates nothing. The host model keeps the parameters and optimizer state for
// checkpoints, synced at each checkpoint and at the end.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/model/gpt.h"
#include "worker/train/optimizer.h"

namespace gantry::train {

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;
  virtual std::string Describe() const = 0;  // "cuda:0 (NVIDIA H100 80GB HBM3), arena 9.81 GB"
  virtual size_t arena_bytes() const = 0;
  // Host → device: the flat parameters, and AdamW's m and v (whole; null: zeros).
  virtual absl::Status Upload(const float* params, const float* m, const float* v) = 0;
  // Device → host (null: skipped).
  virtual absl::Status Download(float* params, float* m, float* v) = 0;
  virtual absl::Status ZeroGrad() = 0;
  // One micro-batch (B, T) of inputs and targets: forward, the fused classifier, backward;
  // gradients accumulate, scaled by dloss_scale (1 / grad_accum). Returns the mean loss.
  virtual absl::StatusOr<float> ForwardBackward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                                float dloss_scale) = 0;
  virtual absl::StatusOr<float> Evaluate(const int32_t* inputs, const int32_t* targets, int B, int T) = 0;
  // Clips the gradients to grad_clip by their global norm (0: no clipping) and applies
  // AdamW (weight decay on the decay tensors only). Returns the norm before clipping.
  virtual absl::StatusOr<double> Update(const AdamWConfig& config, double lr, int step, double grad_clip) = 0;
  // Per-op device time since the last call, when profiling (bench/gpu).
  virtual void set_profiling(bool on) = 0;
  virtual std::vector<std::pair<std::string, double>> TakeOpSeconds() = 0;
};

// A device name: "cpu", "cuda" or "cuda-emulated" (device 0), "cuda:N" or "cuda-emulated:N".
struct DeviceName {
  kernels::BackendKind kind = kernels::BackendKind::kCpu;
  int ordinal = 0;
};
absl::StatusOr<DeviceName> ParseDevice(const std::string& device);
// What a worker of that device offers, for its registration: `gpus` GPUs from the device's
// ordinal on (0: those visible from it, cuda; one, cuda-emulated), named after the first,
// with its memory (cuda-emulated: the host's). count 0 where none is. CheckGpus says
// whether the worker can offer that many (cuda: visible; cuda-emulated: the emulated
// runtime's devices; cpu: --gpus is not for it).
struct DeviceInventory {
  int count = 0;
  std::string name;
  int64_t memory_bytes = 0;
};
DeviceInventory InventoryOf(const DeviceName& device, int gpus = 0);
absl::Status CheckGpus(const DeviceName& device, int gpus);
// "cpu": null (the host loop). "cuda[:N]" and "cuda-emulated[:N]": the GPT on that backend
// (CreateBackendModel) for micro-batches up to (B, T); cuda is UNIMPLEMENTED in a build
// without CUDA, UNAVAILABLE without a visible device.
struct DeviceOptions {
  // CUDA: attention by the fused flash-style kernels (O(T) memory per row; the (T, T)
  // probabilities are never stored) rather than by cuBLAS batched GEMMs over them.
  bool fused_attention = true;
};
// The model::GPT of an accelerator backend as a DeviceModel (AdamW's state and update on the
// device too).
absl::StatusOr<std::unique_ptr<DeviceModel>> CreateBackendModel(std::unique_ptr<kernels::Backend> backend,
                                                                const model::GPTConfig& config, int B, int T);
absl::StatusOr<std::unique_ptr<DeviceModel>> CreateDeviceModel(const std::string& device,
                                                               const model::GPTConfig& config, int B, int T,
                                                               const DeviceOptions& options = {});

}  // namespace gantry::train
