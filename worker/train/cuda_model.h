// The GPT on one CUDA device, in fp32: the twin of model::GPT's forward and backward with the
// kernels of kernels/cuda, and AdamW on the device. Built only with CUDA (GANTRY_WITH_CUDA).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "worker/model/gpt.h"
#include "worker/train/device.h"

namespace gantry::train {

// Micro-batches up to (B, T); the arena (parameters, gradients, m, v, activations, attention
// scratch) is allocated here, once.
absl::StatusOr<std::unique_ptr<DeviceModel>> CreateCudaModel(int device, const model::GPTConfig& config, int B, int T,
                                                             const DeviceOptions& options);

}  // namespace gantry::train
