// The DeviceModel of an accelerator backend: model::GPT on that backend (kernels/backend.h)
// with AdamW's m and v beside its parameters and the update there too, so that a step moves
// nothing but the tokens and the loss between host and device. The same model the host runs,
// over another backend: this replaced the separate CUDA model (worker/train/cuda_model.cc).
#include <chrono>
#include <cmath>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "common/status.h"
#include "kernels/grad_norm.h"
#include "worker/model/gpt.h"
#include "worker/train/device.h"

namespace gantry::train {
namespace {

class BackendModel final : public DeviceModel {
 public:
  BackendModel(std::unique_ptr<kernels::Backend> backend, const model::GPTConfig& config, int B, int T)
      : backend_(std::move(backend)), model_(config, model::ModelShard{}, backend_.get()) {
    m_.Assign(backend_.get(), model_.num_params());
    v_.Assign(backend_.get(), model_.num_params());
    model_.ReserveActivations(B, T);
  }
  absl::Status status() { return Check(); }

  std::string Describe() const override {
    const double bytes = static_cast<double>(arena_bytes());
    return bytes >= 1e9 ? absl::StrFormat("%s, %.2f GB", backend_->Describe(), bytes / 1e9)
                        : absl::StrFormat("%s, %.1f MB", backend_->Describe(), bytes / 1e6);
  }
  size_t arena_bytes() const override {
    return (4 * model_.num_params()) * sizeof(float) + model_.activation_bytes();
  }
  absl::Status Upload(const float* params, const float* m, const float* v) override {
    model_.WriteParams(params);
    for (auto [dst, src] : {std::pair{&m_, m}, std::pair{&v_, v}}) {
      if (src != nullptr) {
        backend_->CopyToDevice(dst->data(), src, dst->size() * sizeof(float));
      } else {
        backend_->Zero(dst->data(), dst->size() * sizeof(float));
      }
    }
    return Check();
  }
  absl::Status Download(float* params, float* m, float* v) override {
    if (params != nullptr) model_.ReadParams(params);
    if (m != nullptr) backend_->CopyToHost(m, m_.data(), m_.size() * sizeof(float));
    if (v != nullptr) backend_->CopyToHost(v, v_.data(), v_.size() * sizeof(float));
    return Check();
  }
  absl::Status ZeroGrad() override {
    model_.ZeroGrad();
    return Check();
  }
  absl::StatusOr<float> ForwardBackward(const int32_t* inputs, const int32_t* targets, int B, int T,
                                        float dloss_scale) override {
    const float loss = model_.ForwardBackward(inputs, targets, B, T, dloss_scale);
    RETURN_IF_ERROR(Check());
    return loss;
  }
  absl::StatusOr<float> Evaluate(const int32_t* inputs, const int32_t* targets, int B, int T) override {
    const float loss = model_.Forward(inputs, targets, B, T);
    RETURN_IF_ERROR(Check());
    return loss;
  }
  absl::StatusOr<double> Update(const AdamWConfig& config, double lr, int step, double grad_clip) override {
    float* params = model_.params();
    float* grads = model_.grads();
    const auto n = static_cast<int64_t>(model_.num_params());
    const double norm = std::sqrt(backend_->SumSquares(grads, n));
    const float coef = kernels::clip_coefficient(norm, static_cast<float>(grad_clip));
    if (coef < 1.0f) backend_->Scale(grads, n, coef);
    const auto t0 = std::chrono::steady_clock::now();
    for (const model::ParamTensor& t : model_.tensors()) {
      backend_->AdamW(params + t.offset, grads + t.offset, m_.data() + t.offset, v_.data() + t.offset,
                      static_cast<int64_t>(t.numel), config.Params(lr, step, t.decay));
    }
    RETURN_IF_ERROR(Check());  // waits: the optimizer's time is its own
    if (profiling_) adamw_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return norm;
  }
  void set_profiling(bool on) override {
    profiling_ = on;
    model_.set_profiling(on);
  }
  std::vector<std::pair<std::string, double>> TakeOpSeconds() override {
    auto ops = model_.op_seconds();
    model_.ResetProfile();
    if (adamw_seconds_ > 0) ops.emplace_back("adamw", std::exchange(adamw_seconds_, 0.0));
    return ops;
  }

 private:
  // The backend's first error since the last check, or the model's.
  absl::Status Check() {
    RETURN_IF_ERROR(backend_->Synchronize());
    return model_.comm_status();
  }

  std::unique_ptr<kernels::Backend> backend_;  // before model_: outlives it
  model::GPT model_;
  kernels::DeviceBuffer m_, v_;
  bool profiling_ = false;
  double adamw_seconds_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceModel>> CreateBackendModel(std::unique_ptr<kernels::Backend> backend,
                                                                const model::GPTConfig& config, int B, int T) {
  auto m = std::make_unique<BackendModel>(std::move(backend), config, B, T);
  RETURN_IF_ERROR(m->status());  // an allocation the device refused
  return std::unique_ptr<DeviceModel>(std::move(m));
}

}  // namespace gantry::train
