// export, one implementation for both front ends: gantry (a job's checkpoint on the shard
// servers, cli/checkpoints.cc) and gantry-train (a checkpoint directory, cli/train/main.cc).
// It runs no model: the checkpoint's parameters are read into host memory and written as
// safetensors (checkpoint::ExportCheckpoint), so gantry_cli_export links neither the model nor
// the kernels (scripts/check_deps.py).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "checkpoint/checkpoint.h"
#include "common/command_flags.h"

namespace gantry::cli {

// export's flags (the output directory is each front end's: gantry's -o, gantry-train's --out).
struct ExportFlags {
  std::string dtype = "fp32";
  std::string tokenizer;  // empty: the job's data.tokenizer, from the manifest
};
void DefineExportFlags(CommandFlags& flags, ExportFlags* e);
// Writes the checkpoint at `source` (any layout) as a Hugging Face model directory `out`
// (config.json, model.safetensors, and the job's tokenizer as tokenizer.json where it is on
// this machine) and prints what it wrote; `what` names the checkpoint in that line.
absl::Status ExportModel(checkpoint::CheckpointSource& source, const std::string& what, const std::string& out,
                         const ExportFlags& e);

}  // namespace gantry::cli
