// ZeRO-Offload's host side (offload.h).
#include "worker/train/offload.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace gantry::train {

absl::StatusOr<std::unique_ptr<HostOffload>> HostOffload::Create(kernels::Backend* be,
                                                                 std::vector<optim::ShardSegment> own,
                                                                 size_t local_size) {
  std::unique_ptr<HostOffload> h(new HostOffload(be, std::move(own), local_size));
  h->master_.AssignHost(be, local_size);
  h->grads_.AssignHost(be, local_size);
  if (local_size > 0 && (h->master_.data() == nullptr || h->grads_.data() == nullptr)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("optimizer offload: cannot allocate 2 x ", local_size * sizeof(float), " bytes of host memory"));
  }
  h->down_ = be->NewStream();
  h->up_ = be->NewStream();
  return h;
}

HostOffload::~HostOffload() {
  if (down_ != nullptr) be_->FreeStream(down_);
  if (up_ != nullptr) be_->FreeStream(up_);
}

template <typename F>
void HostOffload::Parts(size_t c0, size_t c1, F&& f) const {
  for (const optim::ShardSegment& s : own_) {
    const size_t lo = std::max(s.local, c0), hi = std::min(s.local + (s.flat_end - s.flat_begin), c1);
    if (lo < hi) f(s.flat_begin + (lo - s.local), lo, hi - lo);
  }
}

void HostOffload::LoadMaster(const float* params) {
  for (const optim::ShardSegment& s : own_) {
    be_->CopyToHost(master_.data() + s.local, params + s.flat_begin, (s.flat_end - s.flat_begin) * sizeof(float));
  }
}

absl::StatusOr<size_t> HostOffload::Step(optim::AdamW& opt, const float* grads, bool grads_flat, float* params,
                                         bool params_flat, double lr, int step) {
  kernels::Backend& be = *be_;
  const size_t chunks = (local_size_ + chunk_ - 1) / chunk_;
  std::vector<kernels::Backend::Event> arrived(chunks);
  // The gradients' writers (the reductions, the clip) are on the backend's own stream: the
  // copies down wait for them.
  kernels::Backend::Event ready = be.NewEvent();
  be.Record(ready);
  be.SetStream(down_);
  be.Wait(ready);
  size_t bytes = 0;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t c0 = c * chunk_, c1 = std::min(local_size_, c0 + chunk_);
    Parts(c0, c1, [&](size_t fb, size_t lb, size_t n) {
      be.CopyToHostAsync(grads_.data() + lb, grads + (grads_flat ? fb : lb), n * sizeof(float));
      bytes += n * sizeof(float);
    });
    arrived[c] = be.NewEvent();
    be.Record(arrived[c]);
  }
  absl::Status s;
  using I = optim::AdamW::Index;
  for (size_t c = 0; c < chunks && s.ok(); ++c) {
    const size_t c0 = c * chunk_, c1 = std::min(local_size_, c0 + chunk_);
    s.Update(be.SynchronizeEvent(arrived[c]));
    if (!s.ok()) break;
    opt.Step(master_.data(), I::kLocal, grads_.data(), I::kLocal, lr, step, c0, c1);
    if (params == nullptr) continue;
    be.SetStream(up_);
    Parts(c0, c1, [&](size_t fb, size_t lb, size_t n) {
      be.CopyToDeviceAsync(params + (params_flat ? fb : lb), master_.data() + lb, n * sizeof(float));
      bytes += n * sizeof(float);
    });
  }
  be.SetStream(nullptr);
  s.Update(be.Synchronize());  // the parameters up before the gathers read them
  for (kernels::Backend::Event e : arrived) be.FreeEvent(e);
  be.FreeEvent(ready);
  RETURN_IF_ERROR(s);
  return bytes;
}

}  // namespace gantry::train
