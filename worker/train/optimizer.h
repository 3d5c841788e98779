// AdamW over a model's flat parameters: fp32 state m and v, decay on tensors of 2+ dims.
#pragma once

#include <cstdint>
#include <vector>

#include "common/buffer.h"
#include "worker/model/gpt.h"

namespace gantry::train {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

class AdamW {
 public:
  // State for the parameters [begin, end) of the flat buffer (ZeRO stage 1 gives each rank
  // its own range; by default the whole buffer).
  AdamW(const std::vector<model::ParamTensor>& tensors, size_t num_params, AdamWConfig config,
        size_t begin = 0, size_t end = SIZE_MAX);
  // One update of params[begin, end) with learning rate lr; step is 1-based. params is the
  // whole flat buffer, grads holds the gradients of [begin, end) only.
  void Step(float* params, const float* grads, double lr, int step);
  size_t begin() const { return begin_; }
  size_t end() const { return end_; }
  FloatBuffer& m() { return m_; }
  FloatBuffer& v() { return v_; }
  const FloatBuffer& m() const { return m_; }
  const FloatBuffer& v() const { return v_; }

 private:
  struct Range {
    size_t begin, end;
    bool decay;
  };
  std::vector<Range> ranges_;  // runs with the same decay flag, within [begin_, end_)
  size_t begin_ = 0, end_ = 0;
  AdamWConfig config_;
  FloatBuffer m_, v_;
};

}  // namespace gantry::train
