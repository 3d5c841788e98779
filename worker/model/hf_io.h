// Hugging Face GPT-2 model directories: config.json + model.safetensors.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/gpt.h"

namespace gantry::model {

// Reads config.json of a GPT-2 model directory. Fields Gantry cannot honour (another
// activation, untied embeddings, a non-default n_inner) are errors naming the field.
absl::StatusOr<GPTConfig> ReadHFConfig(const std::string& dir);
// The same from config.json's text; `path` names it in errors.
absl::StatusOr<GPTConfig> ParseHFConfig(const std::string& text, const std::string& path);

// Loads DIR/model.safetensors into model (whose config must match). Tensor names may carry
// the "transformer." prefix; lm_head.weight and attention mask buffers are ignored.
absl::Status LoadHFWeights(const std::string& dir, GPT& model);

// Reads the config and the weights.
absl::StatusOr<std::unique_ptr<GPT>> LoadHFModel(const std::string& dir);

// Writes DIR/config.json (DIR created if need be).
// dtype: what model.safetensors holds (config.json's torch_dtype).
absl::Status WriteHFConfig(const std::string& dir, const GPTConfig& config,
                           kernels::Precision dtype = kernels::Precision::kFp32);
std::string HFConfigJson(const GPTConfig& config,
                         kernels::Precision dtype = kernels::Precision::kFp32);  // config.json's text

// "fp32" or "bf16" (`export --dtype`), or INVALID_ARGUMENT naming the choices.
absl::StatusOr<kernels::Precision> ParseExportDtype(const std::string& name);

// Writes DIR/config.json and DIR/model.safetensors that transformers' GPT2LMHeadModel loads,
// the weights in fp32 or bf16 (rounded to nearest, ties to even, as torch's .to(bfloat16)).
absl::Status SaveHFModel(const std::string& dir, const GPT& model,
                         kernels::Precision dtype = kernels::Precision::kFp32);

}  // namespace gantry::model
