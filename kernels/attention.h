// Causal multi-head self-attention (the part between the QKV projection and the output
// projection). qkv rows hold [q | k | v], each C wide, head h at channels [h*hs, (h+1)*hs).
#pragma once

#include "kernels/cast.h"
#include "kernels/types.h"

namespace gantry::kernels {

// qkv (B,T,3C) → out (B,T,C), att (B,NH,T,T) softmax probabilities (zero above the
// diagonal), kept for the backward pass. Mixed precision (p bf16 or fp16): each exp(s - max)
// is rounded to p's type before it is normalised by the unrounded sum, as 16-bit flash
// attention (PyTorch's SDPA under autocast) rounds the weights it multiplies V by. qkv and
// out both fp32 or both of one 16-bit type (read exactly; out rounded; att stays fp32).
// scale: the scores' factor; 0 (every model's) is 1/sqrt(hs). Another is what cuDNN's
// attn_scale asks of its stand-in (kernels/emulated/cudnn_frontend.h), here and below.
void attention_forward(Ptr out, float* att, CPtr qkv, int B, int T, int C, int NH,
                       Precision p = Precision::kFp32, float scale = 0.f);

// qkv (B,T,3C) → lse (B,NH,T): each query row's log-sum-exp of its scaled causal scores,
// log sum_{j<=i} exp(q_i·k_j / sqrt(hs)) (or times scale where it is not 0), accumulated in
// double. What the fused GPU kernel keeps in place of att (kernels/cuda/flash_attention.cuh);
// its reference.
void attention_lse(float* lse, const float* qkv, int B, int T, int C, int NH, float scale = 0.f);

// dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T) → dqkv (B,T,3C) (overwritten);
// scratch (B,NH,T,T) is working memory. dqkv, dout and qkv all fp32 or all of one 16-bit type
// (dqkv rounded).
void attention_backward(Ptr dqkv, float* scratch, CPtr dout, CPtr qkv, const float* att, int B, int T, int C,
                        int NH, float scale = 0.f);

}  // namespace gantry::kernels
