#include "model/block.h"

#include "model/gpt2_block.h"
#include "model/llama_block.h"

namespace gantry::model {

namespace k = gantry::kernels;

void Block::AttentionForward(int l, int B, int T, const char* name) {
  const jobspec::ActivationLayout& o = ctx_.off();
  const ShardDims& d = ctx_.dims();
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
