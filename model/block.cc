#include "model/block.h"

#include "model/context_parallel.h"
#include "model/gpt2_block.h"
#include "model/llama_block.h"

namespace gantry::model {

namespace k = gantry::kernels;

namespace {
// The ring's heads: the key/value heads as qkv holds them (a Llama's grouped ones under context
// parallelism, whose layout keeps them packed; GPT-2's are its query heads).
AttentionHeads RingHeads(const RunContext& ctx, int B) {
  const ShardDims& d = ctx.dims();
  return {B, d.NH, ctx.off().grouped_attention ? d.NKV : d.NH, d.hd, 0.f};
}
}  // namespace

void Block::AttentionForward(int l, int B, int T, const char* name) {
  const jobspec::ActivationLayout& o = ctx_.off();
  const ShardDims& d = ctx_.dims();
  if (RingAttention* ring = ctx_.ring()) {
    // Context parallelism: this rank's rows against the whole sequence's, K and V round the cp
    // group; `att` holds the rows' log-sum-exps (the layout's fused-attention room), fp32.
    ctx_.Op(name, [&] {
      ctx_.Fail(ring->Forward(ctx_.LayerAct(l, o.atty), ctx_.LayerAct(l, o.att), ctx_.LayerAct(l, o.qkv),
                              RingHeads(ctx_, B)));
    });
    return;
  }
  const k::Ptr out = H(ctx_.LayerAct(l, o.atty)), qkv = H(ctx_.LayerAct(l, o.qkv));
  float* state = ctx_.LayerAct(l, o.att);
  ctx_.Op(name, [&] {
    if (o.grouped_attention) {
      ctx_.be().GroupedAttentionForward(out, state, qkv, B, T, d.NH, d.NKV, d.hd, ctx_.precision());
    } else {
      ctx_.be().AttentionForward(out, state, qkv, B, T, d.Ca, d.NH, ctx_.precision());
    }
  });
}

void Block::AttentionBackward(int l, int B, int T) {
  const jobspec::ActivationLayout& o = ctx_.off();
  const ShardDims& d = ctx_.dims();
  if (RingAttention* ring = ctx_.ring()) {
    ctx_.Op("attention bwd", [&] {
      ctx_.Fail(ring->Backward(A(o.dqkv), A(o.datty), ctx_.LayerAct(l, o.qkv), ctx_.LayerAct(l, o.atty),
                               ctx_.LayerAct(l, o.att), RingHeads(ctx_, B)));
    });
    return;
  }
  const k::Ptr dqkv = H(A(o.dqkv)), dout = H(A(o.datty)), qkv = H(ctx_.LayerAct(l, o.qkv)),
               out = H(ctx_.LayerAct(l, o.atty));
  const float* state = ctx_.LayerAct(l, o.att);
  ctx_.Op("attention bwd", [&] {
    if (o.grouped_attention) {
      ctx_.be().GroupedAttentionBackward(dqkv, A(o.datt), dout, qkv, out, state, B, T, d.NH, d.NKV, d.hd,
                                         ctx_.precision());
    } else {
      ctx_.be().AttentionBackward(dqkv, A(o.datt), dout, qkv, out, state, B, T, d.Ca, d.NH, ctx_.precision());
    }
  });
}

void Block::ResidualForward(float* sum, const float* a, const float* b, const NormOut* n, int R, const char* tag) {
  if (n != nullptr) {
    ResidualNormForward(sum, a, b, *n, R, tag);
    return;
  }
  ctx_.Op(*tag ? tag : "residual fwd",
          [&] { ctx_.be().ResidualForward(sum, a, b, static_cast<int64_t>(R) * ctx_.dims().C); });
}

void Block::Recompute(int l, int B, int T, const std::function<void()>& forward) {
  if (ctx_.off().recompute == jobspec::Recompute::kFull) {
    forward();
  } else if (ctx_.off().recompute == jobspec::Recompute::kSelective) {
    AttentionForward(l, B, T, "recompute attention");
  }
}

std::unique_ptr<Block> MakeBlock(RunContext* ctx, TensorParallel* tp, MoeLayers* moe) {
  if (ctx->config().llama()) return std::make_unique<LlamaBlock>(ctx, tp);
  return std::make_unique<Gpt2Block>(ctx, tp, moe);
}

}  // namespace gantry::model
