// Attention of one block of query rows against one block of key/value rows, with each query
// row's log-sum-exp: the pieces that context parallelism's ring attention computes as K and V
// go round the ring, and merges by their log-sum-exps (model/context_parallel.h). fp32, the
// cpu backend's reference (kernels/cpu/attention_block.cc).
//
// Heads are grouped-query attention's: NH query heads over NKV key/value heads (NH a multiple
// of NKV, kernels/gqa.h's CheckGroups), query head h reading key/value head h / (NH / NKV),
// each hd wide. A block is Lq query rows against Lk key rows of each of B sequences:
//  - causal: the two blocks hold the same positions (Lq == Lk), and query row i sees key
//    rows j <= i (the diagonal block of the causal mask);
//  - otherwise every key row is seen (a block wholly below the diagonal). A block wholly above
//    it is not computed at all: the caller skips it.
// A block's operands may hold a 16-bit type's values widened to fp32 (AttentionBlock::values):
// a backend with a 16-bit attention path (cuDNN's SDPA on the cuda kinds) computes the block
// there; these functions, and a backend without one, compute it in fp32 all the same.
#pragma once

#include <cstdint>

#include "kernels/types.h"

namespace gantry::kernels {

// B sequences of rows inside a wider tensor: head h's hd values of row t of sequence b start
// at data + b * seq + t * row + h * hd.
template <typename T>
struct HeadRows {
  T* data;
  int64_t seq, row;
};
// Per-row statistics by head (the log-sum-exps; the backward's D): row t of head h of sequence b
// at data[(b * NH + h) * ld + t].
template <typename T>
struct RowStats {
  T* data;
  int64_t ld;
};

struct AttentionBlock {
  int B, NH, NKV, hd;
  int Lq, Lk;
  bool causal;
  float scale;  // the scores' factor; 0 is 1/sqrt(hd)
  // The forward: the query rows' first block, written over out and lse (whatever they hold)
  // rather than merged into them.
  bool first = false;
  // The type whose values q, k and v (and the backward's out and dout) hold, widened to fp32:
  // kBf16 or kFp16 lets a backend compute the block in that type (the cuda kinds: cuDNN's SDPA,
  // its output and gradients rounded to it once, merged and added in fp32), where it takes the
  // block; kFp32, or a block it does not take, runs the fp32 op.
  Precision values = Precision::kFp32;
};

// Merges the block's attention into a running result: out (B, Lq, NH·hd) and lse (B, NH, Lq)
// hold the attention over the key blocks merged so far (lse -inf, or a.first: none yet, out
// then ignored). With this block's own softmax over its keys, out_b and lse_b, the merge is
//   lse' = log(exp(lse) + exp(lse_b)),  out' = exp(lse - lse') out + exp(lse_b - lse') out_b,
// the softmax over the union of the keys. Scores, exponentials and sums in fp32.
void attention_block_forward(HeadRows<float> out, RowStats<float> lse, HeadRows<const float> q,
                             HeadRows<const float> k, HeadRows<const float> v, const AttentionBlock& a);

// D (B, NH, Lq) = rowsum(dout ∘ out) per query row and head: the flash-attention backward's
// term for the softmax's gradient, from the final (merged) out.
void attention_block_delta(RowStats<float> D, HeadRows<const float> dout, HeadRows<const float> out, int B, int NH,
                           int hd, int L);

// The block's share of the backward, from the final lse and D of the query rows: with
// p_ij = exp(s_ij - lse_i), dp_ij = dout_i · v_j and ds_ij = p_ij (dp_ij - D_i) · scale,
// adds dq_i += Σ_j ds_ij k_j, dk_j += Σ_i ds_ij q_i, dv_j += Σ_i p_ij dout_i (dk and dv summed
// over the query heads of a key/value head's group). dq (B, Lq, NH·hd); dk, dv (B, Lk, NKV·hd).
void attention_block_backward(HeadRows<float> dq, HeadRows<float> dk, HeadRows<float> dv, HeadRows<const float> q,
                              HeadRows<const float> k, HeadRows<const float> v, HeadRows<const float> dout,
                              RowStats<const float> lse, RowStats<const float> D, const AttentionBlock& a);

}  // namespace gantry::kernels
