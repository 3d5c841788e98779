#include "optim/adamw.h"

#include <algorithm>

#include "kernels/adamw.h"

namespace gantry::optim {

AdamW::AdamW(const std::vector<jobspec::ParamTensor>& tensors, size_t num_params, AdamWConfig config,
             kernels::Backend* backend)
    : AdamW(tensors, {ShardSegment{0, num_params, 0}}, num_params, config, backend) {}

AdamW::AdamW(const std::vector<jobspec::ParamTensor>& tensors, const std::vector<ShardSegment>& segments,
             size_t local_size, AdamWConfig config, kernels::Backend* backend)
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
                 size_t local_begin, size_t local_end, const float* grad_scale) {
  for (const Range& r : ranges_) {
    // The part of r in [local_begin, local_end), as an offset into r and a length.
    const size_t n = r.flat_end - r.flat_begin;
    const size_t lo = std::max(r.local, local_begin), hi = std::min(r.local + n, local_end);
    if (lo >= hi) continue;
    const size_t skip = lo - r.local;
    kernels::AdamWParams hp = config_.Params(lr, step, r.decay);
    hp.grad_scale = grad_scale;
    float* p = params + (pindex == Index::kFlat ? r.flat_begin : r.local) + skip;
    const float* g = grads + (gindex == Index::kFlat ? r.flat_begin : r.local) + skip;
    backend_->AdamW(p, g, m_.data() + lo, v_.data() + lo, static_cast<int64_t>(hi - lo), hp);
  }
}

}  // namespace gantry::optim
