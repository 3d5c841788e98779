// Hugging Face GPT-2 and Llama model directories (config.json + model.safetensors) into and
// out of a model::GPT. The format itself (config.json, the weight file from a flat buffer) is
// hf/hf_format.h, which needs no model.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "hf/hf_format.h"
#include "model/gpt.h"

namespace gantry::model {

// Loads DIR/model.safetensors, or the shards that DIR/model.safetensors.index.json's
// weight_map names, into model (whose config must match). GPT-2's tensor names may carry the
// "transformer." prefix; its lm_head.weight (tied) and attention mask buffers are ignored.
absl::Status LoadHFWeights(const std::string& dir, GPT& model);

// Reads the config (hf::ReadConfig) and the weights.
absl::StatusOr<std::unique_ptr<GPT>> LoadHFModel(const std::string& dir);

// Writes DIR/config.json and DIR/model.safetensors that transformers' GPT2LMHeadModel loads,
// the weights in fp32 or bf16 (hf::WriteModel of the model's parameters).
absl::Status SaveHFModel(const std::string& dir, const GPT& model,
                         kernels::Precision dtype = kernels::Precision::kFp32);

}  // namespace gantry::model
