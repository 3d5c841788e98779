// Parameter-server mode's side on a rank (remote_params.h).
#include "worker/train/remote_params.h"

#include <algorithm>

#include "common/status.h"

namespace gantry::train {

void RemoteParams::KeepState(const float* m, const float* v) {
  const size_t n = model_->num_params();
  m_.Assign(n);
  v_.Assign(n);
  std::copy(m, m + n, m_.data());
  std::copy(v, v + n, v_.data());
}

absl::Status RemoteParams::Start(int64_t start_step) {
  pulled_step_ = pushed_step_ = start_step;
  const bool resumed = m_.size() == model_->num_params();
  if (rank_ == 0) {
    std::vector<float> staged;
    RETURN_IF_ERROR(remote_->Init(model_->HostParams(&staged), resumed ? m_.data() : nullptr,
                                  resumed ? v_.data() : nullptr, start_step));
  }
  m_ = FloatBuffer();
  v_ = FloatBuffer();
  return barrier_();
}

absl::Status RemoteParams::Sync() {
  if (pulled_step_ == pushed_step_) return absl::OkStatus();
  RETURN_IF_ERROR(barrier_());  // every rank's push of the last step has returned: it is applied
  if (!model_->backend().Supports(kernels::Capability::kHostAddressable)) {  // the servers' client writes host memory
    FloatBuffer host(model_->num_params());
    RETURN_IF_ERROR(remote_->Pull(host.data()));
    model_->WriteParams(host.data());
  } else {
    RETURN_IF_ERROR(remote_->Pull(model_->params()));
  }
  pulled_step_ = pushed_step_;
  model_->MarkParamsChanged();
  return absl::OkStatus();
}

absl::Status RemoteParams::PushAndPull(const std::vector<GradPiece>& pieces, float coef, double lr, int step) {
  kernels::Backend& be = model_->backend();
  for (const GradPiece& p : pieces) {
    const size_t len = p.flat_end - p.flat_begin;
    if (coef != 1.0f) be.Scale(p.grads, static_cast<int64_t>(len), coef);
    const float* push = p.grads;
    FloatBuffer host;
    if (!be.Supports(kernels::Capability::kHostAddressable)) {  // the servers' client reads host memory
      host.Assign(len);
      be.CopyToHost(host.data(), p.grads, len * sizeof(float));
      push = host.data();
    }
    RETURN_IF_ERROR(remote_->Push(step, lr, push, p.flat_begin, p.flat_end));
  }
  pushed_step_ = step;
  model_->MarkParamsChanged();
  // Synchronous (staleness 0): every step. Else every staleness + 1 steps, so that the
  // parameters are at most `staleness` steps behind. (The next step's all-reduce orders
  // every rank's push before any rank pushes again, so no barrier is needed in between.)
  if (step - pulled_step_ > staleness_) RETURN_IF_ERROR(Sync());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<checkpoint::CheckpointPiece>> RemoteParams::Pieces(
    const std::vector<std::pair<size_t, size_t>>& ranges) {
  RETURN_IF_ERROR(Sync());
  size_t total = 0;
  for (const auto& [b, e] : ranges) total += e - b;
  m_.Assign(total);
  v_.Assign(total);
  std::vector<checkpoint::CheckpointPiece> out;
  size_t at = 0;
  for (const auto& [b, e] : ranges) {
    if (b >= e) continue;
    RETURN_IF_ERROR(remote_->ReadState(b, e, m_.data() + at, v_.data() + at));
    out.push_back({b, e, model_->params() + b, m_.data() + at, v_.data() + at});
    at += e - b;
  }
  return out;
}

}  // namespace gantry::train
