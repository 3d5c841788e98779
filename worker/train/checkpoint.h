// Sharded checkpoints. DIR/step_NNNNNNNN/ holds
//   manifest.json   format, step, seed, the model's shape, the writer's layout (dp, ZeRO
//                   stage), the data position, and the names of the parts
//   config.json     the Hugging Face config of the model
//   part-RRRRR.safetensors  rank R's pieces in unsharded coordinates: for elements [b, e)
//                   of tensor T (flattened), "param/T@b", "adamw.m/T@b" and "adamw.v/T@b",
//                   each of e - b elements; the metadata gives T's global shape
// The parts together cover every element of every tensor exactly once. Each rank writes
// only its own pieces (under ZeRO, the ones it owns; without, an even split), so writing is
// parallel and needs no gather; any layout reads the ranges it needs. A checkpoint is
// written into a temporary directory and renamed into place: it is whole or absent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/gpt.h"
#include "worker/train/optimizer.h"

namespace gantry::train {

struct CheckpointState {
  int64_t step = 0;  // steps completed (the data position: the next batch is step's)
  uint64_t seed = 0;
};

struct CheckpointLayout {
  int dp = 1;
  int zero_stage = 0;
};

// A run of the flat buffer a rank writes, [flat_begin, flat_end), and where its values
// are: each pointer addresses the element flat_begin.
struct CheckpointPiece {
  size_t flat_begin = 0, flat_end = 0;
  const float* params = nullptr;
  const float* m = nullptr;
  const float* v = nullptr;
};

std::string CheckpointDirName(int64_t step);  // step_NNNNNNNN
std::string CheckpointPartName(int rank);     // part-RRRRR.safetensors

// Writes rank's part into dir (which must exist).
absl::Status WriteCheckpointPart(const std::string& dir, int rank, const std::vector<model::ParamTensor>& tensors,
                                 const std::vector<CheckpointPiece>& pieces);
// Writes manifest.json and config.json into dir: the checkpoint of `parts` parts.
absl::Status WriteCheckpointManifest(const std::string& dir, const model::GPTConfig& config,
                                     const CheckpointState& state, const CheckpointLayout& layout, int parts);
// The files of a checkpoint of `parts` parts, manifest first.
std::vector<std::string> CheckpointFiles(int parts);
// Renames tmp_dir into root/step_NNNNNNNN (replacing one of that name), then removes all
// but the newest `keep` checkpoints under root (keep 0: none removed). Returns the path.
absl::StatusOr<std::string> PublishCheckpoint(const std::string& tmp_dir, const std::string& root, int64_t step, int keep);

// The newest complete checkpoint under dir, or NotFound.
absl::StatusOr<std::string> FindLatestCheckpoint(const std::string& dir);
// Reads a checkpoint whatever layout wrote it: the parameters into the model's buffer and,
// where m and v are not null, the optimizer state. Without `own`, m and v are whole flat
// buffers (num_params each). With it, they are a ZeRO rank's compact buffers and only the
// ranges of its segments are read. The checkpoint's model must have the model's shape;
// every element must be covered once (checked on the parts' headers).
absl::StatusOr<CheckpointState> LoadCheckpoint(const std::string& path, model::GPT& model, float* m, float* v,
                                               const std::vector<ShardSegment>* own = nullptr);
// The layout recorded in a checkpoint's manifest.
absl::StatusOr<CheckpointLayout> ReadCheckpointLayout(const std::string& path);
// A checkpoint as a Hugging Face model directory (config.json + model.safetensors).
absl::Status ExportCheckpoint(const std::string& path, const std::string& out_dir);

}  // namespace gantry::train
