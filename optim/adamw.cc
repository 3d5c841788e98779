#include "optim/adamw.h"

#include <algorithm>

#include "kernels/adamw.h"

namespace gantry::optim {

AdamW::AdamW(const std::vector<jobspec::ParamTensor>& tensors, size_t num_params, kernels::AdamWConfig config,
             kernels::Backend* backend)
    : AdamW(tensors, {ShardSegment{0, num_params, 0}}, num_params, config, backend) {}

AdamW::AdamW(const std::vector<jobspec::ParamTensor>& tensors, const std::vector<ShardSegment>& segments,
             size_t local_size, kernels::AdamWConfig config, kernels::Backend* backend)
    : config_(config), backend_(backend), segments_(segments) {
  m_.Assign(backend, local_size);
  v_.Assign(backend, local_size);
  for (const ShardSegment& s : segments) {
    for (const auto& t : tensors) {
      const size_t b = std::max(s.flat_begin, t.offset), e = std::min(s.flat_end, t.offset + t.numel);
      if (b >= e) continue;
      const size_t local = s.local + (b - s.flat_begin);
      if (!ranges_.empty() && ranges_.back().decay == t.decay && ranges_.back().flat_end == b &&
          ranges_.back().local + (b - ranges_.back().flat_begin) == local) {
        ranges_.back().flat_end = e;
      } else {
        ranges_.push_back({b, e, local, t.decay});
      }
    }
  }
}

void AdamW::Step(float* params, Index pindex, const float* grads, Index gindex, double lr, int step,
                 size_t local_begin, size_t local_end, const float* grad_scale,
                 const std::vector<kernels::WorkingCopyRange>* working) {
  spans_.clear();
  const size_t targets = working != nullptr ? working->size() : 0;
  size_t w = 0;  // the first working target that may still overlap
  for (const Range& r : ranges_) {
    // The part of r in [local_begin, local_end), as an offset into r and a length.
    const size_t n = r.flat_end - r.flat_begin;
    const size_t lo = std::max(r.local, local_begin), hi = std::min(r.local + n, local_end);
    if (lo >= hi) continue;
    const float decay = config_.Params(lr, step, r.decay).weight_decay;
    // Cut where a working target begins or ends: a span writes one target or none.
    for (size_t b = r.flat_begin + (lo - r.local), e = b + (hi - lo); b < e;) {
      while (w < targets && (*working)[w].flat_end <= b) ++w;
      size_t cut = e;
      kernels::Ptr at;
      if (w < targets && (*working)[w].flat_begin <= b) {
        cut = std::min(e, (*working)[w].flat_end);
        at = (*working)[w].at + static_cast<int64_t>(b - (*working)[w].flat_begin);
      } else if (w < targets && (*working)[w].flat_begin < e) {
        cut = (*working)[w].flat_begin;
      }
      const size_t local = r.local + (b - r.flat_begin);
      spans_.push_back({params + (pindex == Index::kFlat ? b : local), grads + (gindex == Index::kFlat ? b : local),
                        m_.data() + local, v_.data() + local, static_cast<int64_t>(cut - b), decay, at});
      b = cut;
    }
  }
  kernels::AdamWParams hp = config_.Params(lr, step, false);
  hp.grad_scale = grad_scale;
  backend_->AdamWSpans(spans_.data(), static_cast<int>(spans_.size()), hp);
}

}  // namespace gantry::optim
