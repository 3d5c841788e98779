// Sharded checkpoints (checkpoint/checkpoint.h) on arbitrary files, read as a resuming
// rank reads them: the manifest (ReadCheckpointLayout), config.json (ReadCheckpointModel)
// and, for a small model, every part through LoadCheckpoint: into the whole model with
// AdamW's m and v, and into a tensor- and pipeline-parallel shard keeping a ZeRO rank's
// segments of m and v. The files come from a CheckpointSource over memory, as the shard
// servers' source gives them. The input is manifest.json, then further files (fuzz_util.h,
// SplitFiles):
//   {"format": "gantry-sharded-1", ...}
//   %%file config.json
//   {...}
//   %%file part-00000.safetensors
//   <bytes>
//
// Beyond "no crash": a checkpoint accepted for the whole model is accepted for the shard
// too (both read the same pieces; the shard only keeps fewer of them).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "tests/fuzz/fuzz_util.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/gpt/load_gpt.h"

namespace {

using namespace gantry;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "checkpoint_fuzz: %s\n", what.c_str());
  std::abort();
}

class MemorySource final : public checkpoint::CheckpointSource {
 public:
  explicit MemorySource(const std::vector<std::pair<std::string, std::string>>& files) {
    for (const auto& [name, bytes] : files) files_[name] = std::make_shared<StringSource>(bytes);
  }
  std::string where() const override { return "mem/step_00000010"; }
  absl::StatusOr<std::string> ReadSmallFile(const std::string& name) override {
    auto it = files_.find(name);
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat(where(), "/", name, ": no such file"));
    return it->second->bytes();
  }
  absl::StatusOr<std::shared_ptr<const ByteSource>> OpenPart(const std::string& name) override {
    auto it = files_.find(name);
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat(where(), "/", name, ": no such file"));
    return std::shared_ptr<const ByteSource>(it->second);
  }

 private:
  std::map<std::string, std::shared_ptr<const StringSource>> files_;
};

double ApproxParams(const jobspec::GPTConfig& c) {
  const double C = c.n_embd, F = c.ffn(), E = c.moe.num_experts > 0 ? c.moe.num_experts : 1;
  return static_cast<double>(c.vocab_size) * C * 2 + static_cast<double>(c.max_seq_len) * C +
         static_cast<double>(c.n_layer) * (4 * C * C + 3 * C * F * E + 16 * C);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MemorySource source(fuzz::SplitFiles(absl::string_view(reinterpret_cast<const char*>(data), size), "manifest.json"));
  (void)checkpoint::ReadCheckpointLayout(source);
  auto config = checkpoint::ReadCheckpointModel(source);
  if (!config.ok() || ApproxParams(*config) > (1 << 18)) return 0;

  model::GPT whole(*config);
  std::vector<float> m(whole.num_params()), v(whole.num_params());
  auto loaded = checkpoint::LoadCheckpoint(source, whole, m.data(), v.data());

  // Rank (tp 1 of 2, stage 1 of 2) where the model splits so, keeping the upper half of its
  // flat buffer's m and v as a ZeRO rank would.
  const jobspec::GPTConfig& c = *config;
  const bool tp2 = c.n_head % 2 == 0 && c.kv_heads() % 2 == 0 && c.ffn() % 2 == 0 && c.vocab_size % 2 == 0;
  const int pp = c.n_layer % 2 == 0 ? 2 : 1;
  if (!tp2 || c.moe.num_experts > 0) return 0;
  model::GPT shard(c, jobspec::ShardOf(c, 2, 1, pp, pp - 1));
  const size_t n = shard.num_params(), half = n / 2;
  std::vector<float> sm(n - half), sv(n - half);
  const std::vector<optim::ShardSegment> own = {{half, n, 0}};
  auto part = checkpoint::LoadCheckpoint(source, shard, sm.data(), sv.data(), &own);
  if (loaded.ok() && !part.ok()) {
    Fail("a checkpoint loads whole but not into a shard: " + part.status().ToString());
  }
  return 0;
}
