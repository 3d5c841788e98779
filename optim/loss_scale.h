// Dynamic loss scaling for fp16 training, with PyTorch GradScaler's rules (torch.amp.GradScaler
// with its defaults: growth_factor 2, backoff_factor 0.5): the loss, and so every gradient,
// is multiplied by the scale; the optimizer sees the gradients unscaled; a step whose
// gradients hold an inf or a NaN is skipped (parameters and AdamW's state untouched, its
// step count not advanced) and halves the scale; `window` clean steps in a row double it.
// Its state travels in checkpoints, so a resumed run continues bitwise.
#pragma once

#include <cstdint>

namespace gantry::optim {

struct LossScaleState {
  double scale = 1;           // a power of 2
  int growth_tracker = 0;     // clean steps since the last change
  int64_t skipped_steps = 0;  // steps skipped for an overflow since the start of the job
  bool operator==(const LossScaleState&) const = default;
};

class LossScaler {
 public:
  // Disabled (fp32, bf16): scale 1, no step ever skipped.
  LossScaler() = default;
  LossScaler(double initial_scale, int window) : enabled_(true), window_(window) { state_.scale = initial_scale; }
  bool enabled() const { return enabled_; }
  // What the loss is multiplied by before backward (1 when disabled).
  float scale() const { return static_cast<float>(state_.scale); }
  // After a step's gradients are reduced: found_inf (an inf or NaN anywhere in them, every
  // rank agreeing) means the step was skipped. Returns the new scale.
  double Update(bool found_inf) {
    if (!enabled_) return 1;
    if (found_inf) {
      state_.scale *= 0.5;
      state_.growth_tracker = 0;
      ++state_.skipped_steps;
    } else if (++state_.growth_tracker == window_) {
      state_.scale *= 2;
      state_.growth_tracker = 0;
    }
    return state_.scale;
  }
  const LossScaleState& state() const { return state_; }
  // From a checkpoint (enabled scalers only; a checkpoint of an fp32 or bf16 run holds none,
  // and the spec's initial scale stays).
  void Restore(const LossScaleState& s) {
    if (enabled_) state_ = s;
  }

 private:
  bool enabled_ = false;
  int window_ = 2000;
  LossScaleState state_;
};

}  // namespace gantry::optim
