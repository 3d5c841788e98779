// Context parallelism's block attention (kernels/attention_block.h) computed in a 16-bit type:
// the ring's blocks on a backend's tensor-core path, cuDNN's fused SDPA, where the backend has
// one (cuda and cuda-emulated; not cpu). The ring (model/context_parallel.h) takes it for a
// mixed-precision model's blocks, whose operands are 16-bit values widened to fp32.
//
// An interface beside kernels::Backend rather than in it, asked for by AttentionBlocks16Of:
// adding a Precision to AttentionBlock or new virtuals to Backend recompiles every object of
// the build, which was left for a session that edits kernels/backend.h anyway
// (docs/decisions.md, "The ring's blocks on cuDNN").
#pragma once

#include <cstdint>

#include "kernels/attention_block.h"
#include "kernels/backend.h"
#include "kernels/types.h"

namespace gantry::kernels {

class AttentionBlocks16 {
 public:
  virtual ~AttentionBlocks16() = default;
  // Backend::AttentionBlockForward, with q's, k's and v's values those of p (bf16 or fp16,
  // widened): the block's own softmax and output computed in p as a 16-bit attention call is
  // (cuDNN: the weights rounded to p before they weigh V, the block's output rounded to p, its
  // statistics the block's fp32 log-sum-exp), then merged into (out, lse) in fp32 as the fp32
  // op merges. Where the 16-bit path does not take the block the fp32 op runs instead: cuDNN
  // not loaded or not asked for (said once, when the backend is made), or a shape or scale it
  // does not take or a graph it will not plan (said once per shape, Backend::TakeNotices; with
  // AttentionPath::kCudnn the op's error instead).
  virtual void AttentionBlockForward16(HeadRows<float> out, RowStats<float> lse, HeadRows<const float> q,
                                       HeadRows<const float> k, HeadRows<const float> v, const AttentionBlock& a,
                                       Precision p) = 0;
  // Backend::AttentionBlockBackward, with dout's and out's values also those of p: out is the
  // rows' merged (final) output and lse their merged log-sum-exp, so that the block's dq, dk
  // and dv are its exact share of the whole attention's (the flash-attention identity:
  // p_ij = exp(s_ij - lse_i), D_i = rowsum(dout_i·out_i)). The 16-bit path computes D itself
  // from out and dout (cuDNN's sdpa_backward with the global O, dO and stats) and rounds each
  // block's dq, dk and dv to p before it adds them to the fp32 gradients; the fp32 fallback
  // reads D.
  virtual void AttentionBlockBackward16(HeadRows<float> dq, HeadRows<float> dk, HeadRows<float> dv,
                                        HeadRows<const float> q, HeadRows<const float> k, HeadRows<const float> v,
                                        HeadRows<const float> dout, HeadRows<const float> out,
                                        RowStats<const float> lse, RowStats<const float> D, const AttentionBlock& a,
                                        Precision p) = 0;
  // Blocks this backend computed on its 16-bit path so far, and those of these calls that fell
  // back to the fp32 op: what a test checks to know which path ran.
  struct Counts {
    int64_t forward = 0, backward = 0;
    int64_t forward_fp32 = 0, backward_fp32 = 0;
  };
  virtual Counts blocks16() const = 0;
};

// be's 16-bit block path, or null where it has none (the cpu backend: its blocks are fp32).
inline AttentionBlocks16* AttentionBlocks16Of(Backend& be) { return dynamic_cast<AttentionBlocks16*>(&be); }

}  // namespace gantry::kernels
