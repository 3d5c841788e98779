// Hugging Face model directories (model/hf_io.h), as `gantry-train --init-from DIR`
// reads them: config.json (GPT-2, Llama or Gantry's MoE GPT-2), and when it describes a
// small model, the weights: model.safetensors, or the shards that
// model.safetensors.index.json names. The input is config.json, optionally followed by
// further files (fuzz_util.h, SplitFiles):
//   {"model_type": "gpt2", ...}
//   %%file model.safetensors
//   <bytes>
//
// Beyond "no crash": an accepted config is valid (GPTConfig::Validate) and reads back
// equal from the config.json Gantry writes for it (hf::ConfigJson): export and import agree.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/fuzz/fuzz_util.h"
#include "model/hf_io.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "hf_config_fuzz: %s\n", what.c_str());
  std::abort();
}

// The parameters of a model, roughly (double: no overflow whatever the config says).
double ApproxParams(const gantry::jobspec::GPTConfig& c) {
  const double C = c.n_embd, F = c.ffn(), E = c.moe.num_experts > 0 ? c.moe.num_experts : 1;
  return static_cast<double>(c.vocab_size) * C * 2 + static_cast<double>(c.max_seq_len) * C +
         static_cast<double>(c.n_layer) * (4 * C * C + 3 * C * F * E + 16 * C);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry;
  const auto files = fuzz::SplitFiles(absl::string_view(reinterpret_cast<const char*>(data), size), "config.json");
  auto config = hf::ParseConfig(files[0].second, "config.json");
  if (!config.ok()) return 0;
  if (absl::Status v = config->Validate(); !v.ok()) Fail("accepted an invalid config: " + v.ToString());
  const std::string written = hf::ConfigJson(*config);
  auto back = hf::ParseConfig(written, "written/config.json");
  if (!back.ok()) Fail("Gantry's own config.json does not parse: " + back.status().ToString() + "\n" + written);
  if (!(*back == *config)) Fail("Gantry's own config.json reads back as another model:\n" + written);
  // The weights, for a model small enough to build here (a big one would only test the
  // machine's memory: the file checks are the same).
  if (files.size() < 2 || ApproxParams(*config) > (1 << 20)) return 0;
  (void)model::LoadHFModel(fuzz::WriteScratchDir("model", files));
  return 0;
}
