// A transformer layer of one architecture, as the stack (model/gpt.h) runs it: its tensors
// from the layer's place in the parameter buffer, its forward and backward (recomputing what
// activation checkpointing dropped), and the architecture's final norm. GPT-2's block
// (model/gpt2_block.h: LayerNorm, GELU MLP or a mixture of experts, biases) and Llama's
// (model/llama_block.h: RMSNorm, RoPE, grouped-query attention, SwiGLU) implement it.
// A block owns no memory: activations are the RunContext's, tensors the stack's.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "kernels/types.h"
#include "model/moe_layer.h"
#include "model/run_context.h"
#include "model/tensor_parallel.h"
#include "model/working_weights.h"

namespace gantry::model {

// A layer's fp32 tensors (or their gradients): the norms', attention's and the MLP's, null
// where the architecture has none (Llama: biases, the norms' bias).
struct LayerParams {
  float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
  // A MoE layer's router (E, C) and its first expert's c_fc.weight, the experts' tensors
  // following at MoeLayers::expert_stride() (the dense MLP's pointers are null there).
  float* gate = nullptr;
  float* experts = nullptr;
};

// A norm's forward as a layer's output meets it: where it writes (out, mean, rstd; mean null for
// RMSNorm) and its tensors (w, and b for LayerNorm's bias, null for RMSNorm).
struct NormOut {
  kernels::Ptr out;
  float *mean, *rstd;
  const float *w, *b;
};

class Block {
 public:
  Block(RunContext* ctx, TensorParallel* tp) : ctx_(*ctx), tp_(*tp) {}
  virtual ~Block() = default;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  // Layer l's tensors, tensor(j) being the address of its j-th (in jobspec::ParameterLayout's
  // order).
  virtual LayerParams Bind(int l, const std::function<float*(size_t)>& tensor) const = 0;
  // Layer l's forward from its input `residual` (this rank's rows) to its output res3; p its
  // fp32 tensors, w its GEMM operands; tag: the ops' name in a recomputation ("" otherwise).
  // Each residual add runs fused with the norm after it (kernels::Backend's
  // ResidualLayerNormForward, ResidualRMSNormForward): the layer's second norm always; with
  // next, the norm its output meets (the next layer's InputNorm, or FinalNorm), which then need
  // not run apart. normed: the input norm was so computed by the layer before (skipped here).
  // The fused ops give the separate ops' bits, so a recomputation (next null, normed false)
  // gives the forward's activations.
  virtual void Forward(int l, const LayerParams& p, const GemmOperands& w, const float* residual, int B, int T,
                       const char* tag, const NormOut* next, bool normed) = 0;
  // Layer l's input norm (ln_1, input_layernorm): its outputs among l's activations.
  virtual NormOut InputNorm(int l, const LayerParams& p) const = 0;
  // Layer l's backward from d(output) in dres to d(input) in dres, its gradients into g.
  virtual void Backward(int l, const LayerParams& p, const GemmOperands& w, const LayerParams& g, const float* residual,
                        int B, int T) = 0;

  // The final norm (ln_f, model.norm): the floats of its tensors at F, its forward over R rows
  // of `in` (its statistics in the head's lnf_mean/lnf_rstd), and its backward, which writes
  // d(in) and accumulates its tensors' gradients at dF.
  virtual size_t final_norm_floats() const = 0;
  virtual NormOut FinalNorm(kernels::Ptr out, const float* F) const = 0;
  void FinalNormForward(kernels::Ptr out, const float* in, const float* F, int R) {
    NormForward(FinalNorm(out, F), in, R, "");
  }
  virtual void FinalNormBackward(float* din, float* dF, kernels::CPtr dout, const float* in, const float* F,
                                 int R, kernels::Ptr din16 = nullptr) = 0;

 protected:
  // Causal self-attention of layer l over its q|k|v rows (qkv) into atty, keeping what its
  // backward reads (att); and that backward, into dqkv. Both architectures call these. With the
  // layout's grouped_attention (a Llama's NKV < NH heads on a backend that takes them) qkv and
  // dqkv are the projection's (NH + 2 NKV)·hd rows, through the backend's grouped calls.
  void AttentionForward(int l, int B, int T, const char* name);
  void AttentionBackward(int l, int B, int T);
  // The architecture's norm over R rows of in; and fused with the residual add sum = a + b
  // before it. tag as Forward's.
  virtual void NormForward(const NormOut& n, const float* in, int R, const char* tag) = 0;
  virtual void ResidualNormForward(float* sum, const float* a, const float* b, const NormOut& n, int R,
                                   const char* tag) = 0;
  // sum = a + b over R rows, fused with the norm n where there is one.
  void ResidualForward(float* sum, const float* a, const float* b, const NormOut* n, int R, const char* tag);
  // Activation checkpointing: what forward did not keep of layer l, computed again as it was
  // (full: the whole layer through `forward`; selective: the attention).
  void Recompute(int l, int B, int T, const std::function<void()>& forward);
  // The current slot's activation at `off`, and a 16-bit view of one in mixed precision.
  float* A(size_t off) const { return ctx_.A(off); }
  kernels::Ptr H(float* p) const { return ctx_.H(p); }

  RunContext& ctx_;
  TensorParallel& tp_;
};

// The block of config's architecture. moe: the stack's MoE layers (GPT-2 with config.moe).
std::unique_ptr<Block> MakeBlock(RunContext* ctx, TensorParallel* tp, MoeLayers* moe);

}  // namespace gantry::model
