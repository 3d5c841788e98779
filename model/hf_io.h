// Hugging Face GPT-2 and Llama model directories: config.json + model.safetensors.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/gpt.h"

namespace gantry::model {

// Reads config.json of a GPT-2 model directory (model_type gpt2 or absent) or a Llama one
// (model_type llama). Fields Gantry cannot honour (GPT-2: another activation, untied
// embeddings, a non-default n_inner; Llama: another activation, biases, tied embeddings,
// scaled RoPE, a head_dim other than hidden_size / heads) are errors naming the field.
absl::StatusOr<jobspec::GPTConfig> ReadHFConfig(const std::string& dir);
// The same from config.json's text; `path` names it in errors.
absl::StatusOr<jobspec::GPTConfig> ParseHFConfig(const std::string& text, const std::string& path);

// Loads DIR/model.safetensors, or the shards that DIR/model.safetensors.index.json's
// weight_map names, into model (whose config must match). GPT-2's tensor names may carry the
// "transformer." prefix; its lm_head.weight (tied) and attention mask buffers are ignored.
absl::Status LoadHFWeights(const std::string& dir, GPT& model);

// Reads the config and the weights.
absl::StatusOr<std::unique_ptr<GPT>> LoadHFModel(const std::string& dir);

// Writes DIR/config.json (DIR created if need be): GPT2LMHeadModel's, or for a Llama config
// LlamaForCausalLM's as transformers' LlamaConfig writes it.
// dtype: what model.safetensors holds (config.json's torch_dtype).
absl::Status WriteHFConfig(const std::string& dir, const jobspec::GPTConfig& config,
                           kernels::Precision dtype = kernels::Precision::kFp32);
std::string HFConfigJson(const jobspec::GPTConfig& config,
                         kernels::Precision dtype = kernels::Precision::kFp32);  // config.json's text

// config.json's model_type for a GPT-2 with mixture-of-experts MLPs. Its tensors are named
// Mixtral-style where they fit (h.L.mlp.gate.weight, h.L.mlp.experts.E.c_fc/c_proj); the
// config's `moe` object holds the MoE keys. transformers has no such model and refuses the
// model_type, rather than loading it as a GPT-2 without its experts.
inline constexpr char kMoeModelType[] = "gantry_moe_gpt2";

// "fp32" or "bf16" (`export --dtype`), or INVALID_ARGUMENT naming the choices.
absl::StatusOr<kernels::Precision> ParseExportDtype(const std::string& name);

// Writes DIR/config.json and DIR/model.safetensors that transformers' GPT2LMHeadModel loads,
// the weights in fp32 or bf16 (rounded to nearest, ties to even, as torch's .to(bfloat16)).
absl::Status SaveHFModel(const std::string& dir, const GPT& model,
                         kernels::Precision dtype = kernels::Precision::kFp32);

}  // namespace gantry::model
