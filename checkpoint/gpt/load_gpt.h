// A checkpoint read into a model::GPT: the side of the checkpoint library that has the model
// (gantry_checkpoint_gpt). The format, and reading it into host memory, are
// checkpoint/checkpoint.h's, which links no model and no kernels.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "model/gpt.h"

namespace gantry::checkpoint {

// Reads a checkpoint whatever layout wrote it (ReadCheckpoint): the parameters into the
// model's buffer (through a host copy where the backend's memory is not host addressable)
// and, where m and v are not null, the optimizer state. Without `own`, m and v are whole flat
// buffers (num_params each). With it, they are a ZeRO rank's compact buffers and only the
// ranges of its segments are read. The checkpoint's model must have the model's shape.
absl::StatusOr<CheckpointState> LoadCheckpoint(CheckpointSource& source, model::GPT& model, float* m, float* v,
                                               const std::vector<optim::ShardSegment>* own = nullptr);
absl::StatusOr<CheckpointState> LoadCheckpoint(const std::string& path, model::GPT& model, float* m, float* v,
                                               const std::vector<optim::ShardSegment>* own = nullptr);

}  // namespace gantry::checkpoint
