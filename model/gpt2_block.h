// GPT-2's layer: pre-LayerNorm attention with a fused q|k|v projection and biases, then a
// GELU (tanh) MLP, or on MoE layers (config.moe) the mixture of experts of model/moe_layer.h.
// Weights in Hugging Face's Conv1D layout (in, out). Tensor parallel as Megatron splits it:
// q|k|v and c_fc by columns, the projections by rows (rank 0 adds their bias).
#pragma once

#include "model/block.h"

namespace gantry::model {

class Gpt2Block : public Block {
 public:
  // moe: the stack's MoE layers (not owned), which run the MLP of every MoE layer.
  Gpt2Block(RunContext* ctx, TensorParallel* tp, MoeLayers* moe) : Block(ctx, tp), moe_(moe) {}

  LayerParams Bind(int l, const std::function<float*(size_t)>& tensor) const override;
  void Forward(int l, const LayerParams& p, const GemmOperands& w, const float* residual, int B, int T,
               const char* tag, const NormOut* next, bool normed) override;
  NormOut InputNorm(int l, const LayerParams& p) const override;
  void Backward(int l, const LayerParams& p, const GemmOperands& w, const LayerParams& g, const float* residual, int B,
                int T) override;
  size_t final_norm_floats() const override { return 2 * static_cast<size_t>(ctx_.dims().C); }
  NormOut FinalNorm(kernels::Ptr out, const float* F) const override;
  void FinalNormBackward(float* din, float* dF, kernels::CPtr dout, const float* in, const float* F, int R,
                         kernels::Ptr din16) override;

 protected:
  void NormForward(const NormOut& n, const float* in, int R, const char* tag) override;
  void ResidualNormForward(float* sum, const float* a, const float* b, const NormOut& n, int R,
                           const char* tag) override;

 private:
  // Layer l's MoE activations (kept for backward) and the MoE working rows of the current slot.
  MoeActivations MoeActs(int l) const;
  MoeScratch MoeWork() const;

  MoeLayers* moe_;
};

}  // namespace gantry::model
