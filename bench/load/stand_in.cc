#include "bench/load/stand_in.h"

#include <functional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gantry::load {
namespace {

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}
std::vector<std::string> AllParts(int world, int slices) {
  std::vector<std::string> parts;
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < slices; ++s) parts.push_back(PartName(r, s, slices));
  }
  return parts;
}

}  // namespace

std::string FileBytes(const std::string& job, int64_t step, const std::string& name, int n) {
  uint64_t x = Mix(std::hash<std::string>()(absl::StrCat(job, "/", step, "/", name)) | 1);
  std::string out(static_cast<size_t>(n), '\0');
  for (int i = 0; i < n; ++i) {
    if (i % 8 == 0) x = Mix(x + 0x9e3779b97f4a7c15ull);
    out[static_cast<size_t>(i)] = static_cast<char>(x >> (8 * (i % 8)));
  }
  return out;
}
std::string PartName(int rank, int slice, int slices) {
  return slices <= 1 ? absl::StrFormat("part-%05d.safetensors", rank)
                     : absl::StrFormat("part-%05d-%03d.safetensors", rank, slice);
}
std::string ManifestFile(const std::string& job, int64_t step, int world, int slices) {
  std::string m = absl::StrCat("{\"format\": \"gantry-load-1\", \"job\": \"", job, "\", \"step\": ", step, ", \"parts\": [");
  const auto parts = AllParts(world, slices);
  for (size_t i = 0; i < parts.size(); ++i) absl::StrAppend(&m, i ? ", " : "", "\"", parts[i], "\"");
  return m + "]}";
}
std::string ExpectedFile(const std::string& job, int64_t step, const std::string& name, int world, int slices,
                         int part_bytes) {
  if (name == "manifest.json") return ManifestFile(job, step, world, slices);
  if (name == "config.json") return "{\"stand_in\": true}";
  return FileBytes(job, step, name, part_bytes);
}

std::string JobSpec(int i, const ControlPlaneOptions& o) {
  const bool two = o.multi_rank_every > 0 && i % o.multi_rank_every == o.multi_rank_every - 1;
  return absl::StrCat("name: load-", i, "\n",
                      "model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\n"
                      "data: {train: /nonexistent.bin}\n"
                      "train: {steps: ", o.steps, ", micro_batch: 1, lr: 1.0e-3}\n",
                      "checkpoint: {every: ", o.checkpoint_every, ", dir: /unused}\n",
                      two ? "parallel: {dp: 2}\n" : "");
}
// The job's index from the spec's name (load-<i>), or -1.
int SpecIndex(const std::string& yaml) {
  const auto at = yaml.find("name: load-");
  if (at == std::string::npos) return -1;
  int i = -1;
  const auto end = yaml.find_first_not_of("0123456789", at + 11);
  if (!absl::SimpleAtoi(yaml.substr(at + 11, end - at - 11), &i)) return -1;
  return i;
}

}  // namespace gantry::load
