// GPT-2 (pre-LayerNorm, learned positions, GELU tanh, tied embeddings) on flat parameter and
// gradient buffers, with Hugging Face GPT-2 tensor names and layouts: Conv1D weights are
// (in, out), so a model directory loads and saves with plain copies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/buffer.h"

namespace gantry::model {

struct GPTConfig {
  int max_seq_len = 1024;  // n_positions: rows of wpe
  int vocab_size = 50257;
  int n_layer = 12;
  int n_head = 12;
  int n_embd = 768;

  absl::Status Validate() const;
  bool operator==(const GPTConfig&) const = default;
};

struct ParamTensor {
  std::string name;  // Hugging Face name without the "transformer." prefix
  std::vector<int64_t> shape;
  size_t offset = 0;  // into the flat buffer, in elements
  size_t numel = 0;
  bool decay = false;  // AdamW weight decay: tensors of 2 or more dimensions only
};

// The parameter tensors of a config, in flat-buffer order.
std::vector<ParamTensor> ParameterLayout(const GPTConfig& config);

class GPT {
 public:
  explicit GPT(const GPTConfig& config);  // config must be valid

  const GPTConfig& config() const { return config_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ParamTensor* FindTensor(const std::string& name) const;
  size_t num_params() const { return params_.size(); }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  const float* grads() const { return grads_.data(); }

  // GPT-2 initialisation: weights N(0, 0.02), residual projections (attn.c_proj, mlp.c_proj)
  // N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weights 1. Each tensor draws from its
  // own stream of (seed, tensor index): deterministic per seed.
  void InitRandom(uint64_t seed);

  // Forward over inputs (B,T). With targets, returns the mean loss (and keeps per-token
  // losses); without, returns NaN. Logits (B,T,V) stay readable until the next call.
  float Forward(const int32_t* inputs, const int32_t* targets, int B, int T);
  // Forward and backward in one call (the classifier's softmax, loss and gradient in one
  // pass). Gradients accumulate into grads(); dloss_scale is 1/grad_accum. Returns the
  // mean loss of this micro-batch.
  float ForwardBackward(const int32_t* inputs, const int32_t* targets, int B, int T,
                        float dloss_scale);
  void ZeroGrad();

  const float* logits() const { return act_.data() + off_.logits; }

  // Per-op wall time, accumulated while profiling is on (bench/ prints it).
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<std::pair<std::string, double>>& op_seconds() const { return op_seconds_; }
  void ResetProfile() { op_seconds_.clear(); }
  // Bytes of activation memory for the current (B,T).
  size_t activation_bytes() const { return act_.size() * sizeof(float); }

 private:
  struct LayerParams {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
  };
  struct ActOffsets {
    size_t encoded, logits, losses, lnf, lnf_mean, lnf_rstd;
    // per layer, base offset + stride
    size_t layer0, layer_stride;
    size_t ln1, ln1_mean, ln1_rstd, qkv, atty, att, attproj, res2, ln2, ln2_mean, ln2_rstd, fch,
        fch_gelu, fcproj, res3;
    // backward scratch
    size_t dres, dln, dqkv, datty, datt, dfch, dlnf;
  };
  LayerParams Layer(float* base, int l) const;
  void EnsureActivations(int B, int T);
  float* A(size_t off) { return act_.data() + off; }
  float* LayerAct(int l, size_t off) { return act_.data() + off_.layer0 + l * off_.layer_stride + off; }
  void RunForward(const int32_t* inputs, int B, int T);
  void RunBackward(int B, int T);

  template <typename F>
  void Op(const char* name, F&& f);

  GPTConfig config_;
  bool profiling_ = false;
  std::vector<std::pair<std::string, double>> op_seconds_;
  std::vector<ParamTensor> tensors_;
  FloatBuffer params_;
  FloatBuffer grads_;
  FloatBuffer act_;
  ActOffsets off_{};
  int act_B_ = 0, act_T_ = 0;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace gantry::model
