// AdamW over a model's flat parameters: fp32 state m and v, decay on tensors of 2+ dims.
#pragma once

#include <vector>

#include "common/buffer.h"
#include "worker/model/gpt.h"

namespace gantry::train {

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

class AdamW {
 public:
  AdamW(const std::vector<model::ParamTensor>& tensors, size_t num_params, AdamWConfig config);
  // One update with learning rate lr; step is 1-based.
  void Step(float* params, const float* grads, double lr, int step);
  FloatBuffer& m() { return m_; }
  FloatBuffer& v() { return v_; }
  const FloatBuffer& m() const { return m_; }
  const FloatBuffer& v() const { return v_; }

 private:
  struct Range {
    size_t begin, end;
    bool decay;
  };
  std::vector<Range> ranges_;  // runs of adjacent tensors with the same decay flag
  AdamWConfig config_;
  FloatBuffer m_, v_;
};

}  // namespace gantry::train
