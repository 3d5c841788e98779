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

// Units are the blocks of the flat buffer that forward and backward use together, in
// flat-buffer order: unit 0 is wte and wpe, unit 1 + l is layer l, unit n_layer + 1 is ln_f.
// unit_begin[u] .. unit_begin[u + 1] is unit u's range (n_layer + 3 entries).
std::vector<size_t> UnitBoundaries(const GPTConfig& config);

// Where the model finds a unit's parameters and puts its gradients when they do not live
// in its own full buffers (ZeRO stages 2 and 3). Pointers address the unit's first element;
// the model calls Release/GradsDone once it will not touch them again.
class ParamHost {
 public:
  virtual ~ParamHost() = default;
  virtual float* AcquireParams(int unit) = 0;
  virtual void ReleaseParams(int unit) = 0;
  // The unit's gradient accumulator, valid until GradsDone (the host zeroes it or keeps it).
  virtual float* AcquireGrads(int unit) = 0;
  // Backward of this micro-batch is done with the unit's gradients.
  virtual void GradsDone(int unit) = 0;
};

// Where each activation of a (B, T) step lives in one flat buffer (in floats; sub-buffers
// 64-byte aligned). Layer l's activations are at layer0 + l * layer_stride + the offset.
// The CPU model and the CUDA model (gpt_cuda.h) share it.
// Activation checkpointing: kFull keeps only each layer's output and recomputes the layer's
// forward in backward; kSelective keeps all but attention's probabilities (B, NH, T, T),
// recomputed from the kept qkv. Both give the same bits as kNone: the recomputation runs the
// same kernels on the same inputs.
enum class Recompute { kNone, kFull, kSelective };

struct ActivationLayout {
  size_t encoded, logits, losses, lnf, lnf_mean, lnf_rstd;
  size_t layer0, layer_stride;
  size_t ln1, ln1_mean, ln1_rstd, qkv, atty, att, attproj, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, fcproj,
      res3;
  // backward scratch
  size_t dres, dln, dqkv, datty, datt, dfch, dlnf;
  // kFull: the one block the layers are recomputed into (layer blocks hold res3 alone, at
  // 0); kSelective: the one att buffer (att is the block's last entry, left out of it).
  size_t scratch = 0;
  Recompute recompute = Recompute::kNone;
  size_t total;
};
ActivationLayout LayoutActivations(const GPTConfig& config, int B, int T, Recompute recompute = Recompute::kNone);

class GPT {
 public:
  explicit GPT(const GPTConfig& config);  // config must be valid

  const GPTConfig& config() const { return config_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  const ParamTensor* FindTensor(const std::string& name) const;
  size_t num_params() const { return unit_begin_.back(); }
  int num_units() const { return static_cast<int>(unit_begin_.size()) - 1; }
  size_t unit_begin(int u) const { return unit_begin_[static_cast<size_t>(u)]; }
  size_t unit_end(int u) const { return unit_begin_[static_cast<size_t>(u) + 1]; }
  // The model's own full buffers are the default home of parameters and gradients. A host
  // (not owned) takes over every unit access; then a buffer it does not need may be freed
  // (ZeRO 2 frees the gradients, ZeRO 3 both) and re-allocated for whole-model work.
  void set_param_host(ParamHost* host) { host_ = host; }
  void FreeParamBuffer() { params_ = FloatBuffer(); }
  void FreeGradBuffer() { grads_ = FloatBuffer(); }
  void AllocateParamBuffer() { if (params_.size() != num_params()) params_.Assign(num_params()); }
  void AllocateGradBuffer() { if (grads_.size() != num_params()) grads_.Assign(num_params()); }
  bool has_param_buffer() const { return params_.size() == num_params(); }
  bool has_grad_buffer() const { return grads_.size() == num_params(); }
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
  // Allocates the activations for (B,T) now rather than at the first forward.
  void ReserveActivations(int B, int T) { EnsureActivations(B, T); }
  // Activation checkpointing (before the first forward, or re-laid out at the next).
  void set_recompute(Recompute r) {
    if (r != recompute_) act_B_ = act_T_ = 0;
    recompute_ = r;
  }
  // Bytes of activation memory for the current (B,T).
  size_t activation_bytes() const { return act_.size() * sizeof(float); }

 private:
  struct LayerParams {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
  };
  // Tensor pointers of layer l, from the layer's unit base pointer.
  LayerParams Layer(float* unit_base, int l) const;
  float* UnitParams(int u) { return host_ ? host_->AcquireParams(u) : params_.data() + unit_begin(u); }
  void ReleaseUnitParams(int u) { if (host_) host_->ReleaseParams(u); }
  float* UnitGrads(int u) { return host_ ? host_->AcquireGrads(u) : grads_.data() + unit_begin(u); }
  void UnitGradsDone(int u) { if (host_) host_->GradsDone(u); }
  void EnsureActivations(int B, int T);
  float* A(size_t off) { return act_.data() + off; }
  float* LayerAct(int l, size_t off) {
    if (off_.recompute == Recompute::kFull && off != off_.res3) return act_.data() + off_.scratch + off;
    if (off_.recompute == Recompute::kFull) return act_.data() + off_.layer0 + l * off_.layer_stride;
    if (off_.recompute == Recompute::kSelective && off == off_.att) return act_.data() + off_.scratch;
    return act_.data() + off_.layer0 + l * off_.layer_stride + off;
  }
  // Layer l's forward from its input `residual` (the ops of RunForward's loop).
  void ForwardLayer(int l, const LayerParams& w, const float* residual, int B, int T, const char* tag);
  void RunForward(const int32_t* inputs, int B, int T);
  void RunBackward(int B, int T);

  template <typename F>
  void Op(const char* name, F&& f);

  GPTConfig config_;
  bool profiling_ = false;
  std::vector<std::pair<std::string, double>> op_seconds_;
  std::vector<ParamTensor> tensors_;
  std::vector<size_t> unit_begin_;
  ParamHost* host_ = nullptr;
  float* wte_ = nullptr;  // unit 0's parameters, acquired from the classifier's forward to its backward
  FloatBuffer params_;
  FloatBuffer grads_;
  FloatBuffer act_;
  ActivationLayout off_{};
  int act_B_ = 0, act_T_ = 0;
  Recompute recompute_ = Recompute::kNone;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace gantry::model
