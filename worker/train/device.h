// The device a rank runs on ("cpu", "cuda:N", "cuda-emulated:N"), and what a worker of that
// device offers. The model and ZeroEngine run on the device's backend (kernels/backend.h),
// one path for every device and layout (train/trainer.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "model/gpt.h"
#include "optim/adamw.h"

namespace gantry::train {

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
// How an accelerator runs (TrainOptions::device_options).
struct DeviceOptions {
  // CUDA: how causal attention runs (kernels::AttentionPath): cuDNN's SDPA for 16-bit jobs
  // where the library loads and the fused flash-style kernels otherwise (auto, the default),
  // cuDNN or an error (cudnn), the fused kernels always (fused), or cuBLAS batched GEMMs over
  // stored (T, T) probabilities (reference).
  kernels::AttentionPath attention = kernels::AttentionPath::kAuto;
};

}  // namespace gantry::train
