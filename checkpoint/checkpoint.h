// Sharded checkpoints. DIR/step_NNNNNNNN/ holds
//   manifest.json   format, step, seed, the model's shape, the writer's layout (dp, ZeRO
//                   stage), the data position, and the names of the parts
//   config.json     the Hugging Face config of the model
//   part-RRRRR.safetensors  rank R's pieces in unsharded coordinates: for elements [b, e)
//                   of tensor T (flattened), "param/T@b", "adamw.m/T@b" and "adamw.v/T@b",
//                   each of e - b elements; the metadata gives T's global shape
//   part-RRRRR-SSS.safetensors  the same, cut into slices at the partition map's bounds
//                   (slice S: the flat range of the map's S-th shard server), when a
//                   cluster stores the checkpoint over several shard servers; the manifest
//                   then lists every (rank, slice) file (some may hold no piece) and "cuts"
// The parts together cover every element of every tensor exactly once. Each rank writes
// only its own pieces (under ZeRO, the ones it owns; without, an even split), so writing is
// parallel and needs no gather; any layout reads the ranges it needs. A checkpoint is
// written into a temporary directory and renamed into place: it is whole or absent.
//
// This library runs no model: it reads and writes host memory laid out by
// jobspec::ParameterLayout, and links no kernels, OpenBLAS or OpenMP (scripts/check_deps.py).
// Reading into a model::GPT is checkpoint/gpt/load_gpt.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/safetensors.h"
#include "jobspec/job_spec.h"
#include "kernels/types.h"  // Precision (header only: no kernel is linked)
#include "optim/loss_scale.h"    // header only
#include "optim/shard_segment.h"  // header only

namespace gantry::checkpoint {

struct CheckpointState {
  int64_t step = 0;  // steps completed
  uint64_t seed = 0;
  // The data position: rows read before step `step` ("data": {"rows"} in the manifest; absent
  // in checkpoints written before it was: then step x the global batch).
  std::optional<int64_t> data_rows;
  // The job's tokenizer (data.tokenizer; empty: the byte tokenizer), which export copies.
  std::string tokenizer;
  // fp16 runs: the loss scaler's state ("loss_scale" in the manifest); absent otherwise, and
  // in checkpoints written before it existed.
  std::optional<optim::LossScaleState> loss_scale;
};

struct CheckpointLayout {
  int dp = 1;
  int zero_stage = 0;
  int tp = 1, pp = 1;
  int ep = 1;  // expert parallelism (any layout reads the checkpoint: experts are named pieces)
  // Context parallelism: its ranks hold the same parameters (the pieces are ZeRO's over dp x cp,
  // any layout reads them: nothing in the parameters is split by cp).
  int cp = 1;
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
// part-RRRRR.safetensors, or with cuts (slices > 1) part-RRRRR-SSS.safetensors.
std::string CheckpointPartName(int rank, int slice = 0, int slices = 1);
// The slice a checkpoint file belongs to: S of part-RRRRR-SSS, 0 of part-RRRRR, -1 for the
// manifest and config.json.
int CheckpointFileSlice(const std::string& name);

// Writes rank's part into dir (which must exist): one file, or with cuts (the interior
// bounds of the partition map, ascending) one file per slice. Returns the file names.
absl::StatusOr<std::vector<std::string>> WriteCheckpointPart(const std::string& dir, int rank,
                                                             const std::vector<jobspec::ParamTensor>& tensors,
                                                             const std::vector<CheckpointPiece>& pieces,
                                                             const std::vector<size_t>& cuts = {});
// The same files in memory, to stream where they go (the shard servers) without a local
// copy: rank's part files laid over the pieces' buffers (which must outlive them), and the
// manifest and config.json. Byte for byte what the writers above and below put on disk.
struct CheckpointFile {
  std::string name;
  std::shared_ptr<const ByteSource> bytes;
};
std::vector<CheckpointFile> CheckpointPartFiles(int rank, const std::vector<jobspec::ParamTensor>& tensors,
                                                const std::vector<CheckpointPiece>& pieces,
                                                const std::vector<size_t>& cuts = {});
std::vector<CheckpointFile> CheckpointManifestFiles(const jobspec::GPTConfig& config, const CheckpointState& state,
                                                    const CheckpointLayout& layout, int parts,
                                                    const std::vector<size_t>& cuts = {});
// Writes manifest.json and config.json into dir: the checkpoint of `parts` parts, each cut
// at `cuts`.
absl::Status WriteCheckpointManifest(const std::string& dir, const jobspec::GPTConfig& config,
                                     const CheckpointState& state, const CheckpointLayout& layout, int parts,
                                     const std::vector<size_t>& cuts = {});
// The files of a checkpoint of `parts` parts cut at `cuts`, manifest first.
std::vector<std::string> CheckpointFiles(int parts, const std::vector<size_t>& cuts = {});

// Where a checkpoint is read from: a directory, or (checkpoint::ShardCheckpointSource) the shard
// servers that hold its files, read range by range.
class CheckpointSource {
 public:
  virtual ~CheckpointSource() = default;
  virtual std::string where() const = 0;  // names the checkpoint in errors
  virtual absl::StatusOr<std::string> ReadSmallFile(const std::string& name) = 0;  // manifest.json, config.json
  virtual absl::StatusOr<std::shared_ptr<const ByteSource>> OpenPart(const std::string& name) = 0;
};
std::unique_ptr<CheckpointSource> DirectorySource(const std::string& dir);
// Renames tmp_dir into root/step_NNNNNNNN (replacing one of that name), then removes all
// but the newest `keep` checkpoints under root (keep 0: none removed). Returns the path.
absl::StatusOr<std::string> PublishCheckpoint(const std::string& tmp_dir, const std::string& root, int64_t step, int keep);

// The newest complete checkpoint under dir, or NotFound.
absl::StatusOr<std::string> FindLatestCheckpoint(const std::string& dir);
// Reads a checkpoint whatever layout wrote it into host memory: the parameters into `params`
// and, where m and v are not null, the optimizer state. `tensors` lay the buffers out: a
// rank's (whole tensors, or its tensor-parallel blocks of them: jobspec::ParameterLayout with
// a shard), of the model `config`, which must be the checkpoint's. Without `own`, m and v
// are flat like params. With it, they are a ZeRO rank's compact buffers and only the ranges
// of its segments are read. Every element must be covered once (checked on the parts'
// headers). checkpoint::LoadCheckpoint (checkpoint/gpt/load_gpt.h) reads into a model.
absl::StatusOr<CheckpointState> ReadCheckpoint(CheckpointSource& source, const jobspec::GPTConfig& config,
                                               const std::vector<jobspec::ParamTensor>& tensors, float* params,
                                               float* m, float* v,
                                               const std::vector<optim::ShardSegment>* own = nullptr);
// The layout recorded in a checkpoint's manifest.
absl::StatusOr<CheckpointLayout> ReadCheckpointLayout(CheckpointSource& source);
// The model shape a checkpoint holds (its config.json).
absl::StatusOr<jobspec::GPTConfig> ReadCheckpointModel(CheckpointSource& source);
// A checkpoint as a Hugging Face model directory (config.json + model.safetensors), with
// its job's tokenizer (tokenizer.json; data::ExportTokenizer) when it had one: `tokenizer`
// where given (an error if it does not load), else the manifest's data.tokenizer. A recorded
// path that is not on this machine (the job ran elsewhere) is left out, and *missing_tokenizer
// names it. dtype: the exported weights' (fp32 or bf16; the checkpoint holds the fp32 master).
absl::Status ExportCheckpoint(CheckpointSource& source, const std::string& out_dir,
                              kernels::Precision dtype = kernels::Precision::kFp32, const std::string& tokenizer = "",
                              std::string* missing_tokenizer = nullptr);
absl::Status ExportCheckpoint(const std::string& path, const std::string& out_dir,
                              kernels::Precision dtype = kernels::Precision::kFp32, const std::string& tokenizer = "",
                              std::string* missing_tokenizer = nullptr);

}  // namespace gantry::checkpoint
