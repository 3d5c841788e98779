#include "worker/train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "worker/model/hf_io.h"

namespace gantry::train {

namespace fs = std::filesystem;

namespace {

constexpr char kFormat[] = "gantry-sharded-1";
constexpr const char* kKinds[] = {"param", "adamw.m", "adamw.v"};

absl::StatusOr<nlohmann::json> ReadManifest(const std::string& path) {
  const std::string file = (fs::path(path) / "manifest.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (j.value("format", "") != kFormat) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": format '", j.value("format", ""), "' is not ", kFormat));
    }
    (void)j.at("step").get<int64_t>();
    (void)j.at("seed").get<uint64_t>();
    (void)j.at("parts").get<std::vector<std::string>>();
    return j;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", e.what()));
  }
}

}  // namespace

std::string CheckpointDirName(int64_t step) { return absl::StrFormat("step_%08d", step); }
std::string CheckpointPartName(int rank) { return absl::StrFormat("part-%05d.safetensors", rank); }

std::vector<std::string> CheckpointFiles(int parts) {
  std::vector<std::string> f = {"manifest.json", "config.json"};
  for (int r = 0; r < parts; ++r) f.push_back(CheckpointPartName(r));
  return f;
}

absl::Status WriteCheckpointPart(const std::string& dir, int rank, const std::vector<model::ParamTensor>& tensors,
                                 const std::vector<CheckpointPiece>& pieces) {
  std::vector<TensorToWrite> out;
  std::map<std::string, std::string> meta;
  for (const CheckpointPiece& p : pieces) {
    for (const auto& t : tensors) {
      const size_t b = std::max(p.flat_begin, t.offset), e = std::min(p.flat_end, t.offset + t.numel);
      if (b >= e) continue;
      const std::string range = absl::StrCat(t.name, "@", b - t.offset);
      const std::vector<int64_t> shape = {static_cast<int64_t>(e - b)};
      const size_t at = b - p.flat_begin;
      out.push_back({absl::StrCat("param/", range), "F32", shape, p.params + at});
      out.push_back({absl::StrCat("adamw.m/", range), "F32", shape, p.m + at});
      out.push_back({absl::StrCat("adamw.v/", range), "F32", shape, p.v + at});
      meta[t.name] = ShapeString(t.shape);
    }
  }
  meta["gantry_part"] = std::to_string(rank);
  return WriteSafetensors((fs::path(dir) / CheckpointPartName(rank)).string(), out, meta);
}

absl::Status WriteCheckpointManifest(const std::string& dir, const model::GPTConfig& config,
                                     const CheckpointState& state, const CheckpointLayout& layout, int parts) {
  RETURN_IF_ERROR(model::WriteHFConfig(dir, config));
  std::vector<std::string> names;
  for (int r = 0; r < parts; ++r) names.push_back(CheckpointPartName(r));
  nlohmann::json j = {
      {"format", kFormat},
      {"step", state.step},
      {"seed", state.seed},
      {"model",
       {{"n_layer", config.n_layer}, {"n_head", config.n_head}, {"n_embd", config.n_embd},
        {"vocab_size", config.vocab_size}, {"max_seq_len", config.max_seq_len}}},
      {"layout", {{"dp", layout.dp}, {"zero_stage", layout.zero_stage}}},
      // Batches follow from (seed, step, rank) alone: the next step's batch is the data position.
      {"data", {{"next_step", state.step}}},
      {"parts", names},
  };
  return WriteFileAtomic((fs::path(dir) / "manifest.json").string(), j.dump(2) + "\n");
}

absl::StatusOr<std::string> PublishCheckpoint(const std::string& tmp_dir, const std::string& root, int64_t step,
                                              int keep) {
  const fs::path final_path = fs::path(root) / CheckpointDirName(step);
  std::error_code ec;
  fs::remove_all(final_path, ec);
  fs::rename(tmp_dir, final_path, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("renaming checkpoint into ", final_path.string(), ": ", ec.message()));
  if (keep > 0) {
    std::vector<fs::path> all;
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.rfind("step_", 0) == 0) all.push_back(e.path());
    }
    std::sort(all.begin(), all.end());
    for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) fs::remove_all(all[i], ec);
  }
  return final_path.string();
}

absl::StatusOr<std::string> FindLatestCheckpoint(const std::string& dir) {
  std::error_code ec;
  std::string best;
  if (fs::is_directory(dir, ec)) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.rfind("step_", 0) == 0 && fs::exists(e.path() / "manifest.json") &&
          n > fs::path(best).filename().string()) {
        best = e.path().string();
      }
    }
  }
  if (best.empty()) return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir));
  return best;
}

absl::StatusOr<CheckpointLayout> ReadCheckpointLayout(const std::string& path) {
  ASSIGN_OR_RETURN(nlohmann::json j, ReadManifest(path));
  CheckpointLayout l;
  l.dp = j.value("layout", nlohmann::json::object()).value("dp", 1);
  l.zero_stage = j.value("layout", nlohmann::json::object()).value("zero_stage", 0);
  return l;
}

absl::StatusOr<CheckpointState> LoadCheckpoint(const std::string& path, model::GPT& model, float* m, float* v,
                                               const std::vector<ShardSegment>* own) {
  ASSIGN_OR_RETURN(nlohmann::json j, ReadManifest(path));
  ASSIGN_OR_RETURN(model::GPTConfig c, model::ReadHFConfig(path));
  const model::GPTConfig& want = model.config();
  if (!(c == want)) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": the checkpoint's model (n_layer ", c.n_layer, ", n_head ", c.n_head, ", n_embd ", c.n_embd,
        ", vocab_size ", c.vocab_size, ", n_positions ", c.max_seq_len, ") differs from the job spec's (", want.n_layer,
        ", ", want.n_head, ", ", want.n_embd, ", ", want.vocab_size, ", ", want.max_seq_len, ")"));
  }
  std::map<std::string, const model::ParamTensor*> by_name;
  for (const auto& t : model.tensors()) by_name[t.name] = &t;
  float* dst[3] = {model.params(), m, v};
  // The flat ranges read, per kind: together they must tile [0, num_params) exactly.
  std::vector<std::pair<size_t, size_t>> covered[3];
  for (const std::string& part : j.at("parts").get<std::vector<std::string>>()) {
    const std::string file = (fs::path(path) / part).string();
    ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(file));
    for (const auto& [name, info] : f.tensors()) {
      const size_t slash = name.find('/'), at = name.rfind('@');
      int kind = -1;
      for (int k = 0; k < 3; ++k) {
        if (slash != std::string::npos && name.compare(0, slash, kKinds[k]) == 0) kind = k;
      }
      size_t begin = 0;
      auto t = slash == std::string::npos || at == std::string::npos || at < slash
                   ? by_name.end()
                   : by_name.find(name.substr(slash + 1, at - slash - 1));
      if (kind < 0 || t == by_name.end() || !absl::SimpleAtoi(name.substr(at + 1), &begin) || info.shape.size() != 1) {
        return absl::DataLossError(absl::StrCat(file, ": '", name, "' is not a piece of a tensor of this model"));
      }
      const size_t n = static_cast<size_t>(info.shape[0]);
      if (begin + n > t->second->numel) {
        return absl::DataLossError(absl::StrCat(file, ": '", name, "' has ", n, " elements from ", begin, ", beyond ",
                                                t->second->name, "'s ", t->second->numel));
      }
      const size_t flat = t->second->offset + begin;
      covered[kind].emplace_back(flat, flat + n);
      if (dst[kind] == nullptr) continue;
      if (kind == 0 || own == nullptr) {
        RETURN_IF_ERROR(f.ReadF32Into(name, info.shape, dst[kind] + flat));
        continue;
      }
      for (const ShardSegment& s : *own) {  // only what this rank keeps, into its compact buffer
        const size_t b = std::max(flat, s.flat_begin), e = std::min(flat + n, s.flat_end);
        if (b < e) RETURN_IF_ERROR(f.ReadF32Slice(name, b - flat, e - b, dst[kind] + s.local + (b - s.flat_begin)));
      }
    }
  }
  for (int k = 0; k < 3; ++k) {
    auto& r = covered[k];
    std::sort(r.begin(), r.end());
    size_t next = 0;
    bool tiled = true;
    for (const auto& [b, e] : r) {
      if (b != next) {
        tiled = false;
        break;
      }
      next = e;
    }
    if (!tiled || next != model.num_params()) {
      return absl::DataLossError(absl::StrCat(path, ": the parts' ", kKinds[k], " pieces do not cover the ",
                                              model.num_params(), " parameters exactly once (a gap or an overlap after element ",
                                              next, ")"));
    }
  }
  CheckpointState s;
  s.step = j.at("step").get<int64_t>();
  s.seed = j.at("seed").get<uint64_t>();
  return s;
}

absl::Status ExportCheckpoint(const std::string& path, const std::string& out_dir) {
  RETURN_IF_ERROR(ReadManifest(path).status());  // a checkpoint at all?
  ASSIGN_OR_RETURN(model::GPTConfig c, model::ReadHFConfig(path));
  model::GPT m(c);
  RETURN_IF_ERROR(LoadCheckpoint(path, m, nullptr, nullptr).status());
  return model::SaveHFModel(out_dir, m);
}

}  // namespace gantry::train
