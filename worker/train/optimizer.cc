#include "worker/train/optimizer.h"

#include "kernels/adamw.h"

#include <algorithm>

namespace gantry::train {

AdamW::AdamW(const std::vector<model::ParamTensor>& tensors, size_t num_params, AdamWConfig config,
             size_t begin, size_t end)
    : config_(config), begin_(begin), end_(std::min(end, num_params)) {
  if (begin_ > end_) begin_ = end_;
  m_.Assign(end_ - begin_);
  v_.Assign(end_ - begin_);
  for (const auto& t : tensors) {
    const size_t b = std::max(begin_, t.offset), e = std::min(end_, t.offset + t.numel);
    if (b >= e) continue;
    if (!ranges_.empty() && ranges_.back().decay == t.decay && ranges_.back().end == b) {
      ranges_.back().end = e;
    } else {
      ranges_.push_back({b, e, t.decay});
    }
  }
}

void AdamW::Step(float* params, const float* grads, double lr, int step) {
  for (const Range& r : ranges_) {
    kernels::AdamWParams hp{static_cast<float>(lr), static_cast<float>(config_.beta1),
                            static_cast<float>(config_.beta2), static_cast<float>(config_.eps),
                            r.decay ? static_cast<float>(config_.weight_decay) : 0.f, step};
    const size_t local = r.begin - begin_;
    kernels::adamw_update(params + r.begin, grads + local, m_.data() + local, v_.data() + local,
                          static_cast<int64_t>(r.end - r.begin), hp);
  }
}

}  // namespace gantry::train
