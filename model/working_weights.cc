// Mixed precision's 16-bit working weights (working_weights.h).
#include "model/working_weights.h"

namespace gantry::model {

void WorkingWeights::Refresh(const float* params) {
  if (valid_ || !mixed()) return;
  const std::vector<jobspec::ParamTensor>& t = *tensors_;
  if (image_at_.empty()) {  // the image's layout: the GEMM tensors in flat order
    // A tensor that a GEMM reads with the next one as one matrix is followed by it unpadded;
    // each such run (and each tensor alone) starts 64-byte aligned.
    size_t at = 0;
    image_at_.assign(t.size(), 0);
    for (size_t i = 0; i < t.size(); ++i) {
      image_at_[i] = at;
      if (!t[i].gemm) continue;
      const bool joined_next = i + 1 < t.size() && t[i + 1].gemm_joined;
      at = joined_next ? at + t[i].numel : (at + t[i].numel + 31) / 32 * 32;
    }
    image_at_.push_back(at);
  }
  const size_t floats = (image_at_.back() + 1) / 2;
  if (image_.size() != floats) image_.Assign(be_, floats, /*zero=*/false);
  auto* image = reinterpret_cast<uint16_t*>(image_.data());
  for (size_t i = 0; i < t.size(); ++i) {
    if (!t[i].gemm) continue;
    be_->Convert(kernels::Ptr(image + image_at_[i], lp_), params + t[i].offset, static_cast<int64_t>(t[i].numel));
  }
  valid_ = true;
}

std::vector<kernels::WorkingCopyRange> WorkingWeights::ImageRanges() {
  std::vector<kernels::WorkingCopyRange> out;
  if (!mixed() || image_.size() == 0 || image_at_.empty()) return out;
  const std::vector<jobspec::ParamTensor>& t = *tensors_;
  auto* image = reinterpret_cast<uint16_t*>(image_.data());
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].gemm) out.push_back({t[i].offset, t[i].offset + t[i].numel, kernels::Ptr(image + image_at_[i], lp_)});
  }
  return out;
}

GemmOperands WorkingWeights::Layer(const float* const src[8], size_t first, bool per_unit) {
  if (!mixed()) return {src[0], src[1], src[2], src[3], src[4], src[5], src[6], src[7]};
  const std::vector<jobspec::ParamTensor>& t = *tensors_;
  // The layer's GEMM operands, as (first tensor, tensors) of the layer, in GemmOperands order:
  // GPT-2's tensors 2-5 and 8-11; Llama's q|k|v, o, gate|up and down (no biases).
  struct Operand {
    int first = -1, count = 0;
  };
  static constexpr Operand kGpt2[8] = {{2, 1}, {3, 1}, {4, 1}, {5, 1}, {8, 1}, {9, 1}, {10, 1}, {11, 1}};
  static constexpr Operand kLlama[8] = {{1, 3}, {}, {4, 1}, {}, {6, 2}, {}, {8, 1}, {}};
  const Operand* ops = llama_ ? kLlama : kGpt2;
  kernels::CPtr p[8] = {};
  if (!per_unit) {
    const auto* image = reinterpret_cast<const uint16_t*>(image_.data());
    for (int i = 0; i < 8; ++i) {
      if (ops[i].count > 0) p[i] = kernels::CPtr(image + image_at_[first + ops[i].first], lp_);
    }
  } else {  // the gathered unit's tensors cast now
    size_t total = 0;
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < ops[i].count; ++j) total += t[first + ops[i].first + j].working_room();
    }
    if (unit_.size() < (total + 1) / 2) unit_.Assign(be_, (total + 1) / 2, /*zero=*/false);
    auto* out = reinterpret_cast<uint16_t*>(unit_.data());
    for (int i = 0; i < 8; ++i) {
      if (ops[i].count == 0) continue;
      size_t n = 0;  // the operand's tensors are adjacent in the unit: one conversion
      for (int j = 0; j < ops[i].count; ++j) n += t[first + ops[i].first + j].numel;
      be_->Convert(kernels::Ptr(out, lp_), src[i], static_cast<int64_t>(n));
      p[i] = kernels::CPtr(out, lp_);
      out += (n + 31) / 32 * 32;
    }
  }
  return {p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]};
}

kernels::CPtr WorkingWeights::Classifier(const float* W, bool per_unit) {
  if (!mixed()) return W;
  if (!per_unit) return kernels::CPtr(reinterpret_cast<const uint16_t*>(image_.data()) + image_at_[classifier_], lp_);
  const size_t n = (*tensors_)[classifier_].numel;
  if (wte_.size() != (n + 1) / 2) wte_.Assign(be_, (n + 1) / 2, /*zero=*/false);
  be_->Convert(kernels::Ptr(wte_.data(), lp_), W, static_cast<int64_t>(n));
  return kernels::CPtr(wte_.data(), lp_);
}

}  // namespace gantry::model
