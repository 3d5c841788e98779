// Llama's layer: RMSNorm, then attention with RoPE over grouped key/value heads (q|k|v in one
// projection, the key/value heads repeated to the query heads for the attention kernel, or read
// as they are where the backend takes grouped heads: cuDNN's SDPA),
// then a SwiGLU MLP (gate|up in one projection); no biases. Weights in nn.Linear's layout
// (out, in). Tensor parallel by heads and by the MLP's columns, as GPT-2's block.
#pragma once

#include "kernels/backend.h"
#include "model/block.h"

namespace gantry::model {

class LlamaBlock : public Block {
 public:
  LlamaBlock(RunContext* ctx, TensorParallel* tp);

  LayerParams Bind(int l, const std::function<float*(size_t)>& tensor) const override;
  void Forward(int l, const LayerParams& p, const GemmOperands& w, const float* residual, int B, int T,
               const char* tag, const NormOut* next, bool normed) override;
  NormOut InputNorm(int l, const LayerParams& p) const override;
  void Backward(int l, const LayerParams& p, const GemmOperands& w, const LayerParams& g, const float* residual, int B,
                int T) override;
  size_t final_norm_floats() const override { return static_cast<size_t>(ctx_.dims().C); }
  NormOut FinalNorm(kernels::Ptr out, const float* F) const override;
  void FinalNormBackward(float* din, float* dF, kernels::CPtr dout, const float* in, const float* F, int R,
                         kernels::Ptr din16) override;

 protected:
  void NormForward(const NormOut& n, const float* in, int R, const char* tag) override;
  void ResidualNormForward(float* sum, const float* a, const float* b, const NormOut& n, int R,
                           const char* tag) override;

 private:
  float eps() const { return static_cast<float>(ctx_.config().norm_eps); }
  // Whether the key/value heads are repeated into the attention's 3·NH·hd rows (fewer than the
  // query heads, and a backend whose attention does not read them grouped).
  bool repeats() const { return ctx_.dims().NKV != ctx_.dims().NH && !ctx_.off().grouped_attention; }
  // RoPE on the q and k heads of B·T qkv rows (inverse: its transpose, the backward), at the
  // rows' positions: t = row % T, or under context parallelism the context's positions.
  void Rope(kernels::Ptr qkv, int B, int T, bool inverse);

  kernels::DeviceBuffer inv_freq_;  // RoPE's inverse frequencies (head_dim / 2)
};

}  // namespace gantry::model
