// Local checkpoints of gantry-train: DIR/step_NNNNNNNN/ holds a Hugging Face model
// directory (config.json, model.safetensors), optimizer.safetensors (AdamW m and v) and
// state.json (the completed step, the seed). A checkpoint is written to a temporary
// directory and renamed into place: it is whole or absent.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/gpt.h"
#include "worker/train/optimizer.h"

namespace gantry::train {

struct CheckpointState {
  int64_t step = 0;  // steps completed
  uint64_t seed = 0;
};

// m and v are the optimizer state of the whole flat buffer (num_params each).
absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir, const model::GPT& model, const float* m,
                                           const float* v, const CheckpointState& state);
// The newest complete checkpoint under dir, or NotFound.
absl::StatusOr<std::string> FindLatestCheckpoint(const std::string& dir);
// Loads weights, optimizer state and state; the model's config must match the checkpoint's.
absl::StatusOr<CheckpointState> LoadCheckpoint(const std::string& path, model::GPT& model, float* m,
                                               float* v);

}  // namespace gantry::train
