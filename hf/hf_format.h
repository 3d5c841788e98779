// The Hugging Face model directory's format, apart from any model that runs: config.json to
// and from a jobspec::GPTConfig (GPT-2, Llama, Gantry's MoE GPT-2), and model.safetensors
// written from a flat host buffer laid out by jobspec::ParameterLayout. No kernels, no
// backend: the checkpoint library's export and the CLI's commands that run no model use it
// (docs/decisions.md, "The CLI's libraries"); model/hf_io.h loads and saves a model::GPT
// through it.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "jobspec/job_spec.h"
#include "kernels/types.h"  // Precision (header only: no kernel is linked)

namespace gantry::hf {

// Reads config.json of a GPT-2 model directory (model_type gpt2 or absent) or a Llama one
// (model_type llama). Fields Gantry cannot honour (GPT-2: another activation, untied
// embeddings, a non-default n_inner; Llama: another activation, biases, tied embeddings,
// scaled RoPE, a head_dim other than hidden_size / heads) are errors naming the field.
absl::StatusOr<jobspec::GPTConfig> ReadConfig(const std::string& dir);
// The same from config.json's text; `path` names it in errors.
absl::StatusOr<jobspec::GPTConfig> ParseConfig(const std::string& text, const std::string& path);

// Writes DIR/config.json (DIR created if need be): GPT2LMHeadModel's, or for a Llama config
// LlamaForCausalLM's as transformers' LlamaConfig writes it.
// dtype: what model.safetensors holds (config.json's torch_dtype).
absl::Status WriteConfig(const std::string& dir, const jobspec::GPTConfig& config,
                         kernels::Precision dtype = kernels::Precision::kFp32);
std::string ConfigJson(const jobspec::GPTConfig& config,
                       kernels::Precision dtype = kernels::Precision::kFp32);  // config.json's text

// config.json's model_type for a GPT-2 with mixture-of-experts MLPs. Its tensors are named
// Mixtral-style where they fit (h.L.mlp.gate.weight, h.L.mlp.experts.E.c_fc/c_proj); the
// config's `moe` object holds the MoE keys. transformers has no such model and refuses the
// model_type, rather than loading it as a GPT-2 without its experts.
inline constexpr char kMoeModelType[] = "gantry_moe_gpt2";

// "fp32" or "bf16" (`export --dtype`), or INVALID_ARGUMENT naming the choices.
absl::StatusOr<kernels::Precision> ParseExportDtype(const std::string& name);

// Writes DIR/config.json and DIR/model.safetensors that transformers' GPT2LMHeadModel (or
// LlamaForCausalLM) loads: each of `tensors` (whole tensors, not a rank's shards) read from
// params + its offset, in fp32 or bf16 (rounded to nearest, ties to even, as torch's
// .to(bfloat16)).
absl::Status WriteModel(const std::string& dir, const jobspec::GPTConfig& config,
                        const std::vector<jobspec::ParamTensor>& tensors, const float* params,
                        kernels::Precision dtype = kernels::Precision::kFp32);

}  // namespace gantry::hf
