#include "worker/model/hf_io.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace gantry::model {

namespace fs = std::filesystem;

absl::StatusOr<GPTConfig> ReadHFConfig(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseHFConfig(text, path);
}

absl::StatusOr<GPTConfig> ParseHFConfig(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  auto get_int = [&](const char* field, int* out) -> absl::Status {
    if (!j.contains(field)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": missing field '", field, "'"));
    }
    if (!j[field].is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": field '", field, "' is not an integer"));
    }
    *out = j[field].get<int>();
    return absl::OkStatus();
  };
  GPTConfig c;
  RETURN_IF_ERROR(get_int("n_positions", &c.max_seq_len));
  RETURN_IF_ERROR(get_int("vocab_size", &c.vocab_size));
  RETURN_IF_ERROR(get_int("n_layer", &c.n_layer));
  RETURN_IF_ERROR(get_int("n_head", &c.n_head));
  RETURN_IF_ERROR(get_int("n_embd", &c.n_embd));
  if (j.contains("model_type") && j["model_type"] != "gpt2") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": field 'model_type' is ", j["model_type"].dump(), ", expected \"gpt2\""));
  }
  if (j.contains("activation_function")) {
    const auto& a = j["activation_function"];
    if (!a.is_string() || (a != "gelu_new" && a != "gelu_pytorch_tanh")) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": field 'activation_function' is ", a.dump(), ", only the tanh GELU (gelu_new) is supported"));
    }
  }
  if (j.contains("n_inner") && !j["n_inner"].is_null() &&
      (!j["n_inner"].is_number_integer() || j["n_inner"].get<int>() != 4 * c.n_embd)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": field 'n_inner' is ", j["n_inner"].dump(), ", only 4 * n_embd is supported"));
  }
  if (j.contains("tie_word_embeddings") && j["tie_word_embeddings"] == false) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": field 'tie_word_embeddings' is false, only tied embeddings are supported"));
  }
  if (j.contains("layer_norm_epsilon") && j["layer_norm_epsilon"].is_number() &&
      std::abs(j["layer_norm_epsilon"].get<double>() - 1e-5) > 1e-12) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": field 'layer_norm_epsilon' is ", j["layer_norm_epsilon"].dump(), ", only 1e-5 is supported"));
  }
  if (auto s = c.Validate(); !s.ok()) return Annotate(s, path);
  return c;
}

absl::Status LoadHFWeights(const std::string& dir, GPT& model) {
  const std::string path = (fs::path(dir) / "model.safetensors").string();
  ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open(path));
  // Tensors are named with or without the "transformer." prefix; use whichever is present.
  const std::string prefix = f.Has("transformer.wte.weight") ? "transformer." : "";
  // Read in place where the host addresses the model's memory, else through a host copy.
  std::vector<float> staged;
  float* params = model.params();
  model.MarkParamsChanged();
  if (!model.backend().host_addressable()) {
    staged.resize(model.num_params());
    params = staged.data();
  }
  for (const ParamTensor& t : model.tensors()) {
    RETURN_IF_ERROR(f.ReadF32Into(prefix + t.name, t.shape, params + t.offset));
  }
  if (!staged.empty()) model.WriteParams(staged.data());
  return model.backend().Synchronize();
}

absl::StatusOr<std::unique_ptr<GPT>> LoadHFModel(const std::string& dir) {
  ASSIGN_OR_RETURN(GPTConfig c, ReadHFConfig(dir));
  auto m = std::make_unique<GPT>(c);
  RETURN_IF_ERROR(LoadHFWeights(dir, *m));
  return m;
}

std::string HFConfigJson(const GPTConfig& c, kernels::Precision dtype) {
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = c.vocab_size;
  j["n_positions"] = c.max_seq_len;
  j["n_ctx"] = c.max_seq_len;
  j["n_embd"] = c.n_embd;
  j["n_layer"] = c.n_layer;
  j["n_head"] = c.n_head;
  j["n_inner"] = nullptr;
  j["activation_function"] = "gelu_new";
  j["layer_norm_epsilon"] = 1e-5;
  j["initializer_range"] = 0.02;
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["attn_pdrop"] = 0.0;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = true;
  j["bos_token_id"] = 0;
  j["eos_token_id"] = 0;
  j["torch_dtype"] = dtype == kernels::Precision::kBf16 ? "bfloat16" : "float32";
  j["gantry_tokenizer"] = c.vocab_size == 256 ? "bytes" : "external";
  return j.dump(2) + "\n";
}

absl::Status WriteHFConfig(const std::string& dir, const GPTConfig& c, kernels::Precision dtype) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating ", dir, ": ", ec.message()));
  return WriteFileAtomic((fs::path(dir) / "config.json").string(), HFConfigJson(c, dtype));
}

absl::StatusOr<kernels::Precision> ParseExportDtype(const std::string& name) {
  if (name == "fp32") return kernels::Precision::kFp32;
  if (name == "bf16") return kernels::Precision::kBf16;
  return absl::InvalidArgumentError(absl::StrCat("--dtype is '", name, "': fp32 or bf16"));
}

absl::Status SaveHFModel(const std::string& dir, const GPT& model, kernels::Precision dtype) {
  if (dtype == kernels::Precision::kFp16) return absl::InvalidArgumentError("export writes fp32 or bf16, not fp16");
  RETURN_IF_ERROR(WriteHFConfig(dir, model.config(), dtype));
  std::vector<float> staged;
  const float* params = model.HostParams(&staged);
  std::vector<uint16_t> bf16;
  if (dtype == kernels::Precision::kBf16) {
    bf16.resize(model.num_params());
    kernels::cast_to_bf16(bf16.data(), params, static_cast<int64_t>(bf16.size()));
  }
  std::vector<TensorToWrite> out;
  for (const ParamTensor& t : model.tensors()) {
    if (bf16.empty()) {
      out.push_back({t.name, "F32", t.shape, params + t.offset});
    } else {
      out.push_back({t.name, "BF16", t.shape, bf16.data() + t.offset});
    }
  }
  return WriteSafetensors((fs::path(dir) / "model.safetensors").string(), out,
                          {{"format", "pt"}, {"producer", "gantry"}});
}

}  // namespace gantry::model
