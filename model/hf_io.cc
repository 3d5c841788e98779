#include "model/hf_io.h"

#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace gantry::model {

namespace fs = std::filesystem;

absl::Status LoadHFWeights(const std::string& dir, GPT& model) {
  // One model.safetensors, or shards named by model.safetensors.index.json's weight_map.
  const std::string single = (fs::path(dir) / "model.safetensors").string();
  const std::string index = (fs::path(dir) / "model.safetensors.index.json").string();
  std::map<std::string, std::string> shard_of;  // tensor → file (sharded)
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
  if (!fs::exists(single) && fs::exists(index)) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(index));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index, ": not a safetensors index (no 'weight_map' object)"));
    }
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat(index, ": weight_map['", name, "'] is ", file.dump(), ", not a file name in ", dir));
      }
      shard_of[name] = file.get<std::string>();
    }
  }
  // The file holding `name` (opened once).
  auto file_of = [&](const std::string& name) -> absl::StatusOr<SafetensorsFile*> {
    std::string file = "model.safetensors";
    if (!shard_of.empty()) {
      auto it = shard_of.find(name);
      if (it == shard_of.end()) return absl::NotFoundError(absl::StrCat(index, ": no tensor '", name, "' in weight_map"));
      file = it->second;
    }
    auto& f = files[file];
    if (!f) {
      ASSIGN_OR_RETURN(SafetensorsFile opened, SafetensorsFile::Open((fs::path(dir) / file).string()));
      f = std::make_unique<SafetensorsFile>(std::move(opened));
    }
    return f.get();
  };
  // GPT-2's tensors are named with or without the "transformer." prefix; use whichever is
  // present. Llama's carry their full names.
  std::string prefix;
  if (!model.config().llama()) {
    bool prefixed = shard_of.count("transformer.wte.weight") > 0;  // sharded: the index says
    if (shard_of.empty()) {
      ASSIGN_OR_RETURN(SafetensorsFile * f, file_of(""));
      prefixed = f->Has("transformer.wte.weight");
    }
    if (prefixed) prefix = "transformer.";
  }
  // Read in place where the host addresses the model's memory, else through a host copy.
  std::vector<float> staged;
  float* params = model.params();
  model.MarkParamsChanged();
  if (!model.backend().Supports(kernels::Capability::kHostAddressable)) {
    staged.resize(model.num_params());
    params = staged.data();
  }
  for (const jobspec::ParamTensor& t : model.tensors()) {
    ASSIGN_OR_RETURN(SafetensorsFile * f, file_of(prefix + t.name));
    RETURN_IF_ERROR(f->ReadF32Into(prefix + t.name, t.shape, params + t.offset));
  }
  if (!staged.empty()) model.WriteParams(staged.data());
  return model.backend().Synchronize();
}

absl::StatusOr<std::unique_ptr<GPT>> LoadHFModel(const std::string& dir) {
  ASSIGN_OR_RETURN(jobspec::GPTConfig c, hf::ReadConfig(dir));
  auto m = std::make_unique<GPT>(c);
  RETURN_IF_ERROR(LoadHFWeights(dir, *m));
  return m;
}

absl::Status SaveHFModel(const std::string& dir, const GPT& model, kernels::Precision dtype) {
  std::vector<float> staged;
  return hf::WriteModel(dir, model.config(), model.tensors(), model.HostParams(&staged), dtype);
}

}  // namespace gantry::model
