#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "jobspec/job_spec.h"
#include "data/tokenizer.h"
#include "hf/hf_format.h"

namespace gantry::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr char kFormat[] = "gantry-sharded-1";
constexpr const char* kKinds[] = {"param", "adamw.m", "adamw.v"};

// An integer in [lo, hi] (json: a signed or unsigned integer, not a float).
bool IntegerIn(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return false;
  const int64_t x = v.get<int64_t>();
  return lo <= x && x <= hi;
}

absl::StatusOr<nlohmann::json> ReadManifest(CheckpointSource& source) {
  const std::string file = (fs::path(source.where()) / "manifest.json").string();
  ASSIGN_OR_RETURN(std::string text, source.ReadSmallFile("manifest.json"));
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (j.value("format", "") != kFormat) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": format '", j.value("format", ""), "' is not ", kFormat));
    }
    // Every field's type is checked before LoadCheckpoint reads it with get<>: that converts
    // a float past an integer's range with undefined behaviour (found by
    // tests/fuzz/checkpoint_fuzz: "step": 5e71) and throws on a string where it wants a number.
    auto bad = [&](const std::string& field, const nlohmann::json& v, absl::string_view want) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", field, " is ", v.dump(), ", not ", want));
    };
    if (!IntegerIn(j.at("step"), 0, INT64_MAX)) return bad("step", j.at("step"), "an integer >= 0");
    if (!j.at("seed").is_number_unsigned()) return bad("seed", j.at("seed"), "an integer >= 0");
    (void)j.at("parts").get<std::vector<std::string>>();
    if (j.contains("data")) {
      const nlohmann::json& d = j.at("data");
      if (d.contains("rows") && !IntegerIn(d.at("rows"), 0, INT64_MAX)) return bad("data.rows", d.at("rows"), "an integer >= 0");
      if (d.contains("tokenizer") && !d.at("tokenizer").is_string()) return bad("data.tokenizer", d.at("tokenizer"), "a string");
    }
    if (j.contains("loss_scale")) {  // fp16 runs
      const nlohmann::json& ls = j.at("loss_scale");
      if (!ls.at("scale").is_number()) return bad("loss_scale.scale", ls.at("scale"), "a number");
      if (!IntegerIn(ls.at("growth_tracker"), std::numeric_limits<int>::min(), std::numeric_limits<int>::max())) {
        return bad("loss_scale.growth_tracker", ls.at("growth_tracker"), "an integer");
      }
      if (!IntegerIn(ls.at("skipped_steps"), INT64_MIN, INT64_MAX)) {
        return bad("loss_scale.skipped_steps", ls.at("skipped_steps"), "an integer");
      }
    }
    return j;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", e.what()));
  }
}

// One file of rank's pieces.
// The tensors of one file of rank's pieces, and its metadata.
std::vector<TensorToWrite> PartTensors(int rank, const std::vector<jobspec::ParamTensor>& tensors,
                                       const std::vector<CheckpointPiece>& pieces, std::map<std::string, std::string>* meta_out) {
  std::vector<TensorToWrite> out;
  std::map<std::string, std::string>& meta = *meta_out;
  for (const CheckpointPiece& p : pieces) {
    for (const auto& t : tensors) {
      if (t.replica) continue;  // another rank writes these values
      const size_t b = std::max(p.flat_begin, t.offset), e = std::min(p.flat_end, t.offset + t.numel);
      if (b >= e) continue;
      // Pieces are in the whole tensor's coordinates: a shard's block is one run per row
      // and column run (one run in all for whole rows).
      const int64_t lb = static_cast<int64_t>(b - t.offset), le = static_cast<int64_t>(e - t.offset);
      jobspec::ForEachRun(t, [&](int64_t g, int64_t l, int64_t n) {
        const int64_t lo = std::max(lb, l), hi = std::min(le, l + n);
        if (lo >= hi) return;
        const std::string range = absl::StrCat(t.name, "@", g + (lo - l));
        const std::vector<int64_t> shape = {hi - lo};
        const size_t at = t.offset + static_cast<size_t>(lo) - p.flat_begin;
        out.push_back({absl::StrCat("param/", range), "F32", shape, p.params + at});
        out.push_back({absl::StrCat("adamw.m/", range), "F32", shape, p.m + at});
        out.push_back({absl::StrCat("adamw.v/", range), "F32", shape, p.v + at});
      });
      meta[t.name] = ShapeString(t.global_shape);
    }
  }
  meta["gantry_part"] = std::to_string(rank);
  return out;
}

// The pieces clipped to slice s of the cuts: [cuts[s-1], cuts[s]).
std::vector<CheckpointPiece> SliceOf(const std::vector<CheckpointPiece>& pieces, const std::vector<size_t>& cuts, int s) {
  const int slices = static_cast<int>(cuts.size()) + 1;
  const size_t lo = s == 0 ? 0 : cuts[s - 1], hi = s + 1 < slices ? cuts[s] : SIZE_MAX;
  std::vector<CheckpointPiece> in;
  for (const CheckpointPiece& p : pieces) {
    const size_t b = std::max(p.flat_begin, lo), e = std::min(p.flat_end, hi);
    if (b >= e) continue;
    const size_t at = b - p.flat_begin;
    in.push_back({b, e, p.params + at, p.m + at, p.v + at});
  }
  return in;
}

std::string ManifestJson(const jobspec::GPTConfig& config, const CheckpointState& state, const CheckpointLayout& layout,
                         int parts, const std::vector<size_t>& cuts) {
  std::vector<std::string> names = CheckpointFiles(parts, cuts);
  names.erase(names.begin(), names.begin() + 2);  // the parts only
  nlohmann::json j = {
      {"format", kFormat},
      {"step", state.step},
      {"seed", state.seed},
      {"model",
       {{"n_layer", config.n_layer}, {"n_head", config.n_head}, {"n_embd", config.n_embd},
        {"vocab_size", config.vocab_size}, {"max_seq_len", config.max_seq_len}}},
      {"layout", {{"dp", layout.dp}, {"zero_stage", layout.zero_stage}, {"tp", layout.tp}, {"pp", layout.pp}}},
      // The reads follow from (seed, rows read) alone (data/dataset.h).
      {"data", {{"next_step", state.step}}},
      {"parts", names},
  };
  if (layout.ep > 1) j["layout"]["ep"] = layout.ep;  // (absent: 1, as in manifests written before it)
  if (layout.cp > 1) j["layout"]["cp"] = layout.cp;  // (likewise)
  if (!cuts.empty()) j["cuts"] = cuts;
  if (state.data_rows) j["data"]["rows"] = *state.data_rows;
  if (!state.tokenizer.empty()) j["data"]["tokenizer"] = state.tokenizer;
  if (state.loss_scale) {
    j["loss_scale"] = {{"scale", state.loss_scale->scale},
                       {"growth_tracker", state.loss_scale->growth_tracker},
                       {"skipped_steps", state.loss_scale->skipped_steps}};
  }
  return j.dump(2) + "\n";
}

class DirSource final : public CheckpointSource {
 public:
  explicit DirSource(std::string dir) : dir_(std::move(dir)) {}
  std::string where() const override { return dir_; }
  absl::StatusOr<std::string> ReadSmallFile(const std::string& name) override {
    return ReadFileToString((fs::path(dir_) / name).string());
  }
  absl::StatusOr<std::shared_ptr<const ByteSource>> OpenPart(const std::string& name) override {
    return OpenFileSource((fs::path(dir_) / name).string());
  }

 private:
  const std::string dir_;
};

}  // namespace

std::unique_ptr<CheckpointSource> DirectorySource(const std::string& dir) { return std::make_unique<DirSource>(dir); }

std::string CheckpointDirName(int64_t step) { return absl::StrFormat("step_%08d", step); }
std::string CheckpointPartName(int rank, int slice, int slices) {
  if (slices <= 1) return absl::StrFormat("part-%05d.safetensors", rank);
  return absl::StrFormat("part-%05d-%03d.safetensors", rank, slice);
}

int CheckpointFileSlice(const std::string& name) {
  if (name.rfind("part-", 0) != 0) return -1;
  int rank = 0, slice = 0;
  return std::sscanf(name.c_str(), "part-%d-%d.safetensors", &rank, &slice) == 2 ? slice : 0;
}

std::vector<std::string> CheckpointFiles(int parts, const std::vector<size_t>& cuts) {
  std::vector<std::string> f = {"manifest.json", "config.json"};
  const int slices = static_cast<int>(cuts.size()) + 1;
  for (int r = 0; r < parts; ++r) {
    for (int s = 0; s < slices; ++s) f.push_back(CheckpointPartName(r, s, slices));
  }
  return f;
}

absl::StatusOr<std::vector<std::string>> WriteCheckpointPart(const std::string& dir, int rank,
                                                             const std::vector<jobspec::ParamTensor>& tensors,
                                                             const std::vector<CheckpointPiece>& pieces,
                                                             const std::vector<size_t>& cuts) {
  const int slices = static_cast<int>(cuts.size()) + 1;
  std::vector<std::string> files;
  for (int s = 0; s < slices; ++s) {
    std::map<std::string, std::string> meta;
    const std::vector<TensorToWrite> out = PartTensors(rank, tensors, SliceOf(pieces, cuts, s), &meta);
    files.push_back(CheckpointPartName(rank, s, slices));
    RETURN_IF_ERROR(WriteSafetensors((fs::path(dir) / files.back()).string(), out, meta));
  }
  return files;
}

std::vector<CheckpointFile> CheckpointPartFiles(int rank, const std::vector<jobspec::ParamTensor>& tensors,
                                                const std::vector<CheckpointPiece>& pieces,
                                                const std::vector<size_t>& cuts) {
  const int slices = static_cast<int>(cuts.size()) + 1;
  std::vector<CheckpointFile> files;
  for (int s = 0; s < slices; ++s) {
    std::map<std::string, std::string> meta;
    const std::vector<TensorToWrite> out = PartTensors(rank, tensors, SliceOf(pieces, cuts, s), &meta);
    files.push_back({CheckpointPartName(rank, s, slices), SafetensorsSource(out, meta)});
  }
  return files;
}

std::vector<CheckpointFile> CheckpointManifestFiles(const jobspec::GPTConfig& config, const CheckpointState& state,
                                                    const CheckpointLayout& layout, int parts,
                                                    const std::vector<size_t>& cuts) {
  return {{"manifest.json", std::make_shared<StringSource>(ManifestJson(config, state, layout, parts, cuts))},
          {"config.json", std::make_shared<StringSource>(hf::ConfigJson(config))}};
}

absl::Status WriteCheckpointManifest(const std::string& dir, const jobspec::GPTConfig& config,
                                     const CheckpointState& state, const CheckpointLayout& layout, int parts,
                                     const std::vector<size_t>& cuts) {
  RETURN_IF_ERROR(hf::WriteConfig(dir, config));
  return WriteFileAtomic((fs::path(dir) / "manifest.json").string(), ManifestJson(config, state, layout, parts, cuts));
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

absl::StatusOr<CheckpointLayout> ReadCheckpointLayout(CheckpointSource& source) {
  ASSIGN_OR_RETURN(nlohmann::json j, ReadManifest(source));
  const std::string file = (fs::path(source.where()) / "manifest.json").string();
  // Each field checked here: json::value() throws (out of this function, through the
  // trainer) on a layout that is not an object or a field that is not a number, and a
  // manifest may come off the network from a shard server.
  const nlohmann::json* layout = nullptr;
  if (j.contains("layout")) {
    layout = &j["layout"];
    if (!layout->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": layout is ", layout->dump(), ", not an object"));
    }
  }
  auto field = [&](const char* key, int fallback, int lo, int* out) -> absl::Status {
    *out = fallback;
    if (layout == nullptr || !layout->contains(key)) return absl::OkStatus();
    const nlohmann::json& v = (*layout)[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > std::numeric_limits<int>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": layout.", key, " is ", v.dump(), ", not an integer >= ", lo));
    }
    *out = v.get<int>();
    return absl::OkStatus();
  };
  CheckpointLayout l;
  RETURN_IF_ERROR(field("dp", 1, 1, &l.dp));
  RETURN_IF_ERROR(field("zero_stage", 0, 0, &l.zero_stage));
  RETURN_IF_ERROR(field("tp", 1, 1, &l.tp));
  RETURN_IF_ERROR(field("pp", 1, 1, &l.pp));
  RETURN_IF_ERROR(field("ep", 1, 1, &l.ep));
  RETURN_IF_ERROR(field("cp", 1, 1, &l.cp));
  return l;
}

absl::StatusOr<jobspec::GPTConfig> ReadCheckpointModel(CheckpointSource& source) {
  ASSIGN_OR_RETURN(std::string text, source.ReadSmallFile("config.json"));
  return hf::ParseConfig(text, (fs::path(source.where()) / "config.json").string());
}

absl::StatusOr<CheckpointState> ReadCheckpoint(CheckpointSource& source, const jobspec::GPTConfig& want,
                                               const std::vector<jobspec::ParamTensor>& tensors, float* params,
                                               float* m, float* v, const std::vector<optim::ShardSegment>* own) {
  const std::string path = source.where();
  ASSIGN_OR_RETURN(nlohmann::json j, ReadManifest(source));
  ASSIGN_OR_RETURN(jobspec::GPTConfig c, ReadCheckpointModel(source));
  if (!(c == want)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": the checkpoint's model (", jobspec::DescribeModel(c),
                                                      ") differs from the job spec's in ",
                                                      jobspec::ModelDifferences(c, "checkpoint", want, "job spec")));
  }
  // Pieces name whole tensors (any layout wrote them); this model may hold a shard of each.
  const std::vector<jobspec::ParamTensor> global = jobspec::ParameterLayout(c);
  std::map<std::string, const jobspec::ParamTensor*> by_name, mine;
  for (const auto& t : global) by_name[t.name] = &t;
  for (const auto& t : tensors) mine[t.name] = &t;
  const size_t global_params = global.back().offset + global.back().numel;
  float* dst[3] = {params, m, v};
  // The flat ranges read (whole-model coordinates), per kind: together they must tile
  // [0, global_params) exactly.
  std::vector<std::pair<size_t, size_t>> covered[3];
  for (const std::string& part : j.at("parts").get<std::vector<std::string>>()) {
    const std::string file = (fs::path(path) / part).string();
    ASSIGN_OR_RETURN(std::shared_ptr<const ByteSource> bytes, source.OpenPart(part));
    ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(std::move(bytes), file));
    for (const auto& tensor : f.tensors()) {
      // Not a structured binding: the lambda below captures the name, which clang before 16
      // refuses for a binding (the fuzz build's compiler).
      const std::string& name = tensor.first;
      const SafetensorInfo& info = tensor.second;
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
      // Not begin + n > numel: a begin near 2^64 ("@18446744073709551615") wraps that sum
      // and would pass, placing the piece's values shifted and its coverage wrapped.
      if (begin > t->second->numel || n > t->second->numel - begin) {
        return absl::DataLossError(absl::StrCat(file, ": '", name, "' has ", n, " elements from ", begin, ", beyond ",
                                                t->second->name, "'s ", t->second->numel));
      }
      covered[kind].emplace_back(t->second->offset + begin, t->second->offset + begin + n);
      auto here = mine.find(t->second->name);
      if (dst[kind] == nullptr || here == mine.end()) continue;
      const jobspec::ParamTensor& lt = *here->second;
      // Where the piece [begin, begin + n) of the whole tensor meets this model's block of it.
      absl::Status read;
      jobspec::ForEachRun(lt, [&](int64_t g, int64_t l, int64_t len) {
        const int64_t lo = std::max<int64_t>(static_cast<int64_t>(begin), g);
        const int64_t hi = std::min<int64_t>(static_cast<int64_t>(begin + n), g + len);
        if (lo >= hi || !read.ok()) return;
        const size_t flat = lt.offset + static_cast<size_t>(l + (lo - g));  // this model's flat index
        const size_t from = static_cast<size_t>(lo) - begin, count = static_cast<size_t>(hi - lo);
        if (kind == 0 || own == nullptr) {
          read = f.ReadF32Slice(name, from, count, dst[kind] + flat);
          return;
        }
        for (const optim::ShardSegment& s : *own) {  // only what this rank keeps, into its compact buffer
          const size_t b = std::max(flat, s.flat_begin), e = std::min(flat + count, s.flat_end);
          if (b < e && read.ok()) read = f.ReadF32Slice(name, from + (b - flat), e - b, dst[kind] + s.local + (b - s.flat_begin));
        }
      });
      RETURN_IF_ERROR(read);
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
    if (!tiled || next != global_params) {
      return absl::DataLossError(absl::StrCat(path, ": the parts' ", kKinds[k], " pieces do not cover the ",
                                              global_params, " parameters exactly once (a gap or an overlap after element ",
                                              next, ")"));
    }
  }
  CheckpointState s;
  s.step = j.at("step").get<int64_t>();
  s.seed = j.at("seed").get<uint64_t>();
  if (j.contains("data") && j.at("data").contains("rows")) s.data_rows = j.at("data").at("rows").get<int64_t>();
  if (j.contains("data") && j.at("data").contains("tokenizer")) s.tokenizer = j.at("data").at("tokenizer").get<std::string>();
  if (j.contains("loss_scale")) {
    const nlohmann::json& ls = j.at("loss_scale");
    optim::LossScaleState st;
    st.scale = ls.at("scale").get<double>();
    st.growth_tracker = ls.at("growth_tracker").get<int>();
    st.skipped_steps = ls.at("skipped_steps").get<int64_t>();
    if (!(st.scale > 0) || !std::isfinite(st.scale) || st.growth_tracker < 0 || st.skipped_steps < 0) {
      return absl::DataLossError(absl::StrCat(path, "/manifest.json: loss_scale is invalid (scale ", st.scale,
                                              ", growth_tracker ", st.growth_tracker, ", skipped_steps ",
                                              st.skipped_steps, ")"));
    }
    s.loss_scale = st;
  }
  return s;
}

absl::Status ExportCheckpoint(CheckpointSource& source, const std::string& out_dir, kernels::Precision dtype,
                              const std::string& tokenizer, std::string* missing_tokenizer) {
  RETURN_IF_ERROR(ReadManifest(source).status());  // a checkpoint at all?
  ASSIGN_OR_RETURN(jobspec::GPTConfig c, ReadCheckpointModel(source));
  // The whole model's parameters in host memory, as the export writes them: no model is built.
  const std::vector<jobspec::ParamTensor> tensors = jobspec::ParameterLayout(c);
  std::vector<float> params(tensors.back().offset + tensors.back().numel);
  ASSIGN_OR_RETURN(CheckpointState st, ReadCheckpoint(source, c, tensors, params.data(), nullptr, nullptr));
  std::string tok = tokenizer.empty() ? st.tokenizer : tokenizer;
  std::error_code ec;
  if (tokenizer.empty() && !tok.empty() && !std::filesystem::exists(tok, ec)) {
    if (missing_tokenizer != nullptr) *missing_tokenizer = tok;
    tok.clear();
  }
  if (!tok.empty()) {  // the tokenizer first: a path gone since training fails before any file is written
    auto t = data::Tokenizer::Load(tok);
    if (!t.ok()) {
      return absl::Status(t.status().code(), absl::StrCat("the job's tokenizer (data.tokenizer; export --tokenizer ",
                                                          "names another): ", t.status().message()));
    }
    if ((*t)->vocab_size() > static_cast<uint32_t>(c.vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer ", tok, " has ", (*t)->vocab_size(),
                                                     " tokens, more than the model's vocabulary of ", c.vocab_size));
    }
  }
  RETURN_IF_ERROR(hf::WriteModel(out_dir, c, tensors, params.data(), dtype));
  return tok.empty() ? absl::OkStatus() : data::ExportTokenizer(tok, out_dir);
}

absl::Status ExportCheckpoint(const std::string& path, const std::string& out_dir, kernels::Precision dtype,
                              const std::string& tokenizer, std::string* missing_tokenizer) {
  return ExportCheckpoint(*DirectorySource(path), out_dir, dtype, tokenizer, missing_tokenizer);
}

}  // namespace gantry::checkpoint
