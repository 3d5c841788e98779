// Text generation from a trained model.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gpt.h"

namespace gantry::model {

struct SampleOptions {
  int tokens = 100;          // how many to generate
  float temperature = 1.0f;  // 0 = greedy
  int top_k = 0;             // 0 = the whole vocabulary
  uint64_t seed = 0;
  uint32_t start = 0;  // what an empty prompt starts from (the tokenizer's end of text)
};

// Generates after `prompt`, feeding the model at most max_seq_len tokens of context.
// on_token is called with each new token as it is made.
absl::StatusOr<std::vector<uint32_t>> Sample(model::GPT& model, const std::vector<uint32_t>& prompt,
                                             const SampleOptions& options,
                                             const std::function<void(uint32_t)>& on_token);

}  // namespace gantry::model
