// sample and export, one implementation each, for both front ends: gantry (a job's checkpoint
// on the shard servers, cli/checkpoints.cc) and gantry-train (a model or checkpoint
// directory, cli/train/main.cc). Each front end finds the model its own way; the flags that
// say what to do with it are defined here once (common/command_flags.h), and so is the work.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "checkpoint/checkpoint.h"
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
