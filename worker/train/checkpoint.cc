#include "worker/train/checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "worker/model/hf_io.h"

namespace gantry::train {

namespace fs = std::filesystem;

absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir, const model::GPT& model, const float* m,
                                           const float* v, const CheckpointState& state) {
  const std::string name = absl::StrFormat("step_%08d", state.step);
  const fs::path final_path = fs::path(dir) / name;
  const fs::path tmp = fs::path(dir) / absl::StrCat(".", name, ".tmp.", ::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  RETURN_IF_ERROR(model::SaveHFModel(tmp.string(), model));
  std::vector<TensorToWrite> st;
  const std::vector<int64_t> shape = {static_cast<int64_t>(model.num_params())};
  st.push_back({"adamw.m", "F32", shape, m});
  st.push_back({"adamw.v", "F32", shape, v});
  RETURN_IF_ERROR(WriteSafetensors((tmp / "optimizer.safetensors").string(), st));
  nlohmann::json j = {{"step", state.step}, {"seed", state.seed}, {"format", 1}};
  RETURN_IF_ERROR(WriteFileAtomic((tmp / "state.json").string(), j.dump(2) + "\n"));
  fs::remove_all(final_path, ec);
  fs::rename(tmp, final_path, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("renaming checkpoint into ", final_path.string(), ": ", ec.message()));
  return final_path.string();
}

absl::StatusOr<std::string> FindLatestCheckpoint(const std::string& dir) {
  std::error_code ec;
  std::string best;
  if (fs::is_directory(dir, ec)) {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.rfind("step_", 0) == 0 && fs::exists(e.path() / "state.json") &&
          n > fs::path(best).filename().string()) {
        best = e.path().string();
      }
    }
  }
  if (best.empty()) return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir));
  return best;
}

absl::StatusOr<CheckpointState> LoadCheckpoint(const std::string& path, model::GPT& model, float* m,
                                               float* v) {
  ASSIGN_OR_RETURN(model::GPTConfig c, model::ReadHFConfig(path));
  if (!(c == model.config())) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": checkpoint model shape differs from the job spec's model"));
  }
  RETURN_IF_ERROR(model::LoadHFWeights(path, model));
  const std::string opt_path = (fs::path(path) / "optimizer.safetensors").string();
  ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(opt_path));
  const std::vector<int64_t> shape = {static_cast<int64_t>(model.num_params())};
  RETURN_IF_ERROR(f.ReadF32Into("adamw.m", shape, m));
  RETURN_IF_ERROR(f.ReadF32Into("adamw.v", shape, v));
  const std::string state_path = (fs::path(path) / "state.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(state_path));
  CheckpointState s;
  try {
    auto j = nlohmann::json::parse(text);
    s.step = j.at("step").get<int64_t>();
    s.seed = j.at("seed").get<uint64_t>();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(state_path, ": ", e.what()));
  }
  return s;
}

}  // namespace gantry::train
