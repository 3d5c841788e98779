#include "model/sample.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/rng.h"

namespace gantry::model {

absl::StatusOr<std::vector<uint32_t>> Sample(model::GPT& model, const std::vector<uint32_t>& prompt,
                                             const SampleOptions& options,
                                             const std::function<void(uint32_t)>& on_token) {
  const auto& c = model.config();
  if (options.tokens < 0) return absl::InvalidArgumentError("--tokens must be >= 0");
  if (!(options.temperature >= 0)) return absl::InvalidArgumentError("--temperature must be >= 0");
  for (uint32_t t : prompt) {
    if (t >= static_cast<uint32_t>(c.vocab_size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt token ", t, " is outside the vocabulary (size ", c.vocab_size, ")"));
    }
  }
  if (options.start >= static_cast<uint32_t>(c.vocab_size)) {
    return absl::InvalidArgumentError(absl::StrCat("start token ", options.start, " is outside the vocabulary"));
  }
  std::vector<uint32_t> seq = prompt;
  if (seq.empty()) seq.push_back(options.start);  // start from end-of-text
  // Causal attention: positions after the last real token do not change its logits, so one
  // fixed T serves every step (no reallocation while generating).
  const int T = std::min<int>(c.max_seq_len, static_cast<int>(seq.size()) + options.tokens);
  std::vector<int32_t> window(static_cast<size_t>(T), 0);
  Rng rng(options.seed);
  std::vector<float> probs(static_cast<size_t>(c.vocab_size)), row(static_cast<size_t>(c.vocab_size));
  std::vector<int> order(static_cast<size_t>(c.vocab_size));
  std::vector<uint32_t> out;
  for (int i = 0; i < options.tokens; ++i) {
    const int len = std::min<int>(T, static_cast<int>(seq.size()));
    std::fill(window.begin(), window.end(), 0);
    for (int j = 0; j < len; ++j) window[static_cast<size_t>(j)] = static_cast<int32_t>(seq[seq.size() - len + j]);
    model.Forward(window.data(), nullptr, 1, T);
    model.ReadLogits(row.data(), static_cast<size_t>(len - 1), 1);
    const float* logits = row.data();
    int next = 0;
    if (options.temperature == 0) {
      next = static_cast<int>(std::max_element(logits, logits + c.vocab_size) - logits);
    } else {
      std::iota(order.begin(), order.end(), 0);
      int k = options.top_k > 0 ? std::min(options.top_k, c.vocab_size) : c.vocab_size;
      if (k < c.vocab_size) {
        std::partial_sort(order.begin(), order.begin() + k, order.end(),
                          [&](int a, int b) { return logits[a] > logits[b]; });
      }
      float mx = -INFINITY;
      for (int j = 0; j < k; ++j) mx = std::max(mx, logits[order[j]]);
      double sum = 0;
      for (int j = 0; j < k; ++j) {
        probs[j] = std::exp((logits[order[j]] - mx) / options.temperature);
        sum += probs[j];
      }
      double u = rng.Uniform() * sum;
      next = order[k - 1];
      for (int j = 0; j < k; ++j) {
        u -= probs[j];
        if (u <= 0) {
          next = order[j];
          break;
        }
      }
    }
    seq.push_back(static_cast<uint32_t>(next));
    out.push_back(static_cast<uint32_t>(next));
    if (on_token) on_token(static_cast<uint32_t>(next));
  }
  return out;
}

}  // namespace gantry::model
