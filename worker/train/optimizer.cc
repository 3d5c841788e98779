#include "worker/train/optimizer.h"

#include "kernels/adamw.h"

namespace gantry::train {

AdamW::AdamW(const std::vector<model::ParamTensor>& tensors, size_t num_params,
             AdamWConfig config)
    : config_(config), m_(num_params), v_(num_params) {
  for (const auto& t : tensors) {
    if (!ranges_.empty() && ranges_.back().decay == t.decay && ranges_.back().end == t.offset) {
      ranges_.back().end = t.offset + t.numel;
    } else {
      ranges_.push_back({t.offset, t.offset + t.numel, t.decay});
    }
  }
}

void AdamW::Step(float* params, const float* grads, double lr, int step) {
  for (const Range& r : ranges_) {
    kernels::AdamWParams hp{static_cast<float>(lr), static_cast<float>(config_.beta1),
                            static_cast<float>(config_.beta2), static_cast<float>(config_.eps),
                            r.decay ? static_cast<float>(config_.weight_decay) : 0.f, step};
    kernels::adamw_update(params + r.begin, grads + r.begin, m_.data() + r.begin,
                          v_.data() + r.begin, static_cast<int64_t>(r.end - r.begin), hp);
  }
}

}  // namespace gantry::train
