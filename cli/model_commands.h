// sample, one implementation for both front ends: gantry (a job's checkpoint on the shard
// servers, cli/sample_command.cc) and gantry-train (a model or checkpoint directory,
// cli/train/main.cc). Each front end finds the model its own way; the flags that say what to
// do with it are defined here once (common/command_flags.h), and so is the work. It runs the
// model (on the cpu backend), so it is a library of its own, gantry_cli_model, the one part of
// gantry that links the model's kernels (OpenBLAS, OpenMP); export is cli/export_checkpoint.h,
// which runs no model.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/command_flags.h"

namespace gantry::cli {

// sample's flags. The values before DefineSampleFlags are the defaults.
struct SampleFlags {
  std::string prompt;
  int tokens = 100;
  float temperature = 0.8f;
  int top_k = 40;
  int64_t seed = 0;
  int threads = 0;
  std::string tokenizer;  // empty: the model directory's, else the byte tokenizer
};
void DefineSampleFlags(CommandFlags& flags, SampleFlags* s);
// Generates text from the Hugging Face model directory `model_dir` (on the cpu backend): the
// prompt, then each token as it is made, on stdout.
absl::Status SampleModel(const std::string& model_dir, const SampleFlags& s);

}  // namespace gantry::cli
