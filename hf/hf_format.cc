// The Hugging Face model directory's format (hf_format.h).
#include "hf/hf_format.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace gantry::hf {

namespace fs = std::filesystem;

namespace {

// config.json of a LlamaForCausalLM (transformers' LlamaConfig), its absent fields taking
// LlamaConfig's defaults where it has them (num_key_value_heads: the attention heads;
// rms_norm_eps 1e-6; hidden_act silu; no biases; untied embeddings). RoPE's base may sit at
// the top (transformers 4) or in rope_parameters (transformers 5), or both if they agree.
absl::StatusOr<jobspec::GPTConfig> ParseLlamaConfig(const nlohmann::json& j, const std::string& path) {
  auto bad = [&](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": field '", field, "' ", why));
  };
  auto given = [&](const char* field) { return j.contains(field) && !j[field].is_null(); };
  auto get_int = [&](const char* field, int* out) -> absl::Status {
    if (!given(field)) return absl::InvalidArgumentError(absl::StrCat(path, ": missing field '", field, "'"));
    if (!j[field].is_number_integer()) return bad(field, "is not an integer");
    *out = j[field].get<int>();
    return absl::OkStatus();
  };
  auto get_real = [&](const nlohmann::json& v, absl::string_view field, double* out) -> absl::Status {
    if (!v.is_number()) return bad(field, absl::StrCat("is ", v.dump(), ", not a number"));
    *out = v.get<double>();
    return absl::OkStatus();
  };
  jobspec::GPTConfig c;
  c.arch = jobspec::Arch::kLlama;
  RETURN_IF_ERROR(get_int("hidden_size", &c.n_embd));
  RETURN_IF_ERROR(get_int("num_hidden_layers", &c.n_layer));
  RETURN_IF_ERROR(get_int("num_attention_heads", &c.n_head));
  RETURN_IF_ERROR(get_int("intermediate_size", &c.ffn_hidden));
  RETURN_IF_ERROR(get_int("max_position_embeddings", &c.max_seq_len));
  RETURN_IF_ERROR(get_int("vocab_size", &c.vocab_size));
  c.n_kv_head = c.n_head;
  if (given("num_key_value_heads")) RETURN_IF_ERROR(get_int("num_key_value_heads", &c.n_kv_head));
  // 0 would read as GPTConfig's "the default" rather than as the error it is.
  if (c.n_kv_head < 1) return bad("num_key_value_heads", absl::StrCat("is ", c.n_kv_head, ", must be >= 1"));
  if (c.ffn_hidden < 1) return bad("intermediate_size", absl::StrCat("is ", c.ffn_hidden, ", must be >= 1"));
  c.norm_eps = 1e-6;  // LlamaConfig's default
  if (given("rms_norm_eps")) RETURN_IF_ERROR(get_real(j["rms_norm_eps"], "rms_norm_eps", &c.norm_eps));
  // RoPE: the default (unscaled) kind only.
  if (given("rope_scaling")) {
    return bad("rope_scaling", absl::StrCat("is ", j["rope_scaling"].dump(), ", only unscaled RoPE (null) is supported"));
  }
  bool theta_given = false;
  if (given("rope_theta")) {
    RETURN_IF_ERROR(get_real(j["rope_theta"], "rope_theta", &c.rope_theta));
    theta_given = true;
  }
  if (given("rope_parameters")) {
    const nlohmann::json& rp = j["rope_parameters"];
    if (!rp.is_object()) return bad("rope_parameters", absl::StrCat("is ", rp.dump(), ", not an object"));
    // transformers reads "type" where "rope_type" is absent.
    const char* type_key = rp.contains("rope_type") ? "rope_type" : "type";
    if (rp.contains(type_key) && rp[type_key] != "default") {
      return bad(absl::StrCat("rope_parameters.", type_key),
                 absl::StrCat("is ", rp[type_key].dump(), ", only \"default\" (unscaled RoPE) is supported"));
    }
    if (rp.contains("rope_theta") && !rp["rope_theta"].is_null()) {
      double theta = 0;
      RETURN_IF_ERROR(get_real(rp["rope_theta"], "rope_parameters.rope_theta", &theta));
      if (theta_given && theta != c.rope_theta) {
        return bad("rope_parameters.rope_theta", absl::StrCat("is ", rp["rope_theta"].dump(), " but field 'rope_theta' is ",
                                                              j["rope_theta"].dump(), " (transformers 4 and 5 would "
                                                              "read different bases)"));
      }
      c.rope_theta = theta;
    }
  }
  if (given("hidden_act") && j["hidden_act"] != "silu") {
    return bad("hidden_act", absl::StrCat("is ", j["hidden_act"].dump(), ", only \"silu\" (SwiGLU) is supported"));
  }
  for (const char* field : {"attention_bias", "mlp_bias"}) {
    if (given(field) && j[field] != false) {
      return bad(field, absl::StrCat("is ", j[field].dump(), ", only false (no biases) is supported"));
    }
  }
  if (given("tie_word_embeddings") && j["tie_word_embeddings"] != false) {
    return bad("tie_word_embeddings",
               absl::StrCat("is ", j["tie_word_embeddings"].dump(), ", only untied embeddings (false) are supported"));
  }
  // The product checked for overflow: head_dim 2^62 x 4 heads is undefined (found by
  // tests/fuzz/hf_config_fuzz).
  int64_t head_dims = 0;
  if (given("head_dim") &&
      (!j["head_dim"].is_number_integer() ||
       __builtin_mul_overflow(j["head_dim"].get<int64_t>(), static_cast<int64_t>(c.n_head), &head_dims) ||
       head_dims != c.n_embd)) {
    return bad("head_dim", absl::StrCat("is ", j["head_dim"].dump(), ", only hidden_size / num_attention_heads = ",
                                        c.n_head > 0 ? c.n_embd / c.n_head : 0, " is supported"));
  }
  if (auto s = c.Validate(); !s.ok()) return Annotate(s, path);
  return c;
}

}  // namespace

absl::StatusOr<jobspec::GPTConfig> ReadConfig(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseConfig(text, path);
}

absl::StatusOr<jobspec::GPTConfig> ParseConfig(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON: ", e.what()));
  }
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  if (j.contains("model_type") && j["model_type"] == "llama") return ParseLlamaConfig(j, path);
  // A GPT-2 with mixture-of-experts MLPs (kMoeModelType): transformers has no such class, so
  // its config names a model_type transformers refuses rather than loading it as a GPT-2
  // without its experts.
  const bool moe = j.contains("model_type") && j["model_type"] == kMoeModelType;
  if (j.contains("model_type") && j["model_type"] != "gpt2" && !moe) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": field 'model_type' is ", j["model_type"].dump(),
                                                   ", expected \"gpt2\", \"llama\" or \"", kMoeModelType, "\""));
  }
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
  jobspec::GPTConfig c;
  RETURN_IF_ERROR(get_int("n_positions", &c.max_seq_len));
  RETURN_IF_ERROR(get_int("vocab_size", &c.vocab_size));
  RETURN_IF_ERROR(get_int("n_layer", &c.n_layer));
  RETURN_IF_ERROR(get_int("n_head", &c.n_head));
  RETURN_IF_ERROR(get_int("n_embd", &c.n_embd));
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
  if (moe) {
    const nlohmann::json& m = j.contains("moe") ? j["moe"] : nlohmann::json();
    if (!m.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": field 'moe' is missing or not an object"));
    auto num = [&](const char* field, auto* out) -> absl::Status {
      using T = std::remove_pointer_t<decltype(out)>;
      const bool ok = std::is_integral_v<T> ? m.contains(field) && m[field].is_number_integer()
                                            : m.contains(field) && m[field].is_number();
      if (!ok) return absl::InvalidArgumentError(absl::StrCat(path, ": field 'moe.", field, "' is missing or not a number"));
      *out = m[field].get<T>();
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(num("num_experts", &c.moe.num_experts));
    RETURN_IF_ERROR(num("top_k", &c.moe.top_k));
    RETURN_IF_ERROR(num("capacity_factor", &c.moe.capacity_factor));
    RETURN_IF_ERROR(num("aux_loss_coeff", &c.moe.aux_loss_coeff));
    RETURN_IF_ERROR(num("z_loss_coeff", &c.moe.z_loss_coeff));
    RETURN_IF_ERROR(num("every_n_layers", &c.moe.every_n_layers));
    if (c.moe.num_experts < 1) return absl::InvalidArgumentError(absl::StrCat(path, ": field 'moe.num_experts' must be >= 1"));
  }
  if (auto s = c.Validate(); !s.ok()) return Annotate(s, path);
  return c;
}

std::string ConfigJson(const jobspec::GPTConfig& c, kernels::Precision dtype) {
  nlohmann::ordered_json j;
  if (c.llama()) {
    // What transformers' LlamaConfig writes for a LlamaForCausalLM; RoPE's base both at the
    // top (what transformers 4 reads) and in rope_parameters (transformers 5).
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.n_embd;
    j["intermediate_size"] = c.ffn();
    j["num_hidden_layers"] = c.n_layer;
    j["num_attention_heads"] = c.n_head;
    j["num_key_value_heads"] = c.kv_heads();
    j["head_dim"] = c.head_dim();
    j["max_position_embeddings"] = c.max_seq_len;
    j["hidden_act"] = "silu";
    j["rms_norm_eps"] = c.norm_eps;
    j["rope_theta"] = c.rope_theta;
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
    j["attention_bias"] = false;
    j["attention_dropout"] = 0.0;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
    j["initializer_range"] = 0.02;
    j["tie_word_embeddings"] = false;
    j["use_cache"] = true;
    j["bos_token_id"] = 0;
    j["eos_token_id"] = 0;
    j["torch_dtype"] = dtype == kernels::Precision::kBf16 ? "bfloat16" : "float32";
    j["gantry_tokenizer"] = c.vocab_size == 256 ? "bytes" : "external";
    return j.dump(2) + "\n";
  }
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
  if (c.moe.num_experts > 0) {
    j["architectures"] = {"GantryMoeGPT2"};
    j["model_type"] = kMoeModelType;
    j["moe"] = {{"num_experts", c.moe.num_experts},       {"top_k", c.moe.top_k},
                {"capacity_factor", c.moe.capacity_factor}, {"aux_loss_coeff", c.moe.aux_loss_coeff},
                {"z_loss_coeff", c.moe.z_loss_coeff},       {"every_n_layers", c.moe.every_n_layers}};
  }
  return j.dump(2) + "\n";
}

absl::Status WriteConfig(const std::string& dir, const jobspec::GPTConfig& c, kernels::Precision dtype) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating ", dir, ": ", ec.message()));
  return WriteFileAtomic((fs::path(dir) / "config.json").string(), ConfigJson(c, dtype));
}

absl::StatusOr<kernels::Precision> ParseExportDtype(const std::string& name) {
  if (name == "fp32") return kernels::Precision::kFp32;
  if (name == "bf16") return kernels::Precision::kBf16;
  return absl::InvalidArgumentError(absl::StrCat("--dtype is '", name, "': fp32 or bf16"));
}

absl::Status WriteModel(const std::string& dir, const jobspec::GPTConfig& config,
                        const std::vector<jobspec::ParamTensor>& tensors, const float* params,
                        kernels::Precision dtype) {
  if (dtype == kernels::Precision::kFp16) return absl::InvalidArgumentError("export writes fp32 or bf16, not fp16");
  RETURN_IF_ERROR(WriteConfig(dir, config, dtype));
  std::vector<uint16_t> bf16;
  if (dtype == kernels::Precision::kBf16) {
    size_t n = 0;
    for (const jobspec::ParamTensor& t : tensors) n = std::max(n, t.offset + t.numel);
    bf16.resize(n);
    for (const jobspec::ParamTensor& t : tensors) {
      for (size_t i = t.offset; i < t.offset + t.numel; ++i) bf16[i] = kernels::Bf16Of(params[i]);
    }
  }
  std::vector<TensorToWrite> out;
  for (const jobspec::ParamTensor& t : tensors) {
    if (bf16.empty()) {
      out.push_back({t.name, "F32", t.shape, params + t.offset});
    } else {
      out.push_back({t.name, "BF16", t.shape, bf16.data() + t.offset});
    }
  }
  return WriteSafetensors((fs::path(dir) / "model.safetensors").string(), out,
                          {{"format", "pt"}, {"producer", "gantry"}});
}

}  // namespace gantry::hf
