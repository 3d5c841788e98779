#include "model/block.h"

#include "model/gpt2_block.h"
#include "model/llama_block.h"

namespace gantry::model {

void Block::AttentionForward(int l, int B, int T, const char* name) {
  const jobspec::ActivationLayout& o = ctx_.off();
  const ShardDims& d = ctx_.dims();
  ctx_.Op(name, [&] {
    ctx_.be().AttentionForward(H(ctx_.LayerAct(l, o.atty)), ctx_.LayerAct(l, o.att),
                               H(ctx_.LayerAct(l, o.qkv)), B, T, d.Ca, d.NH, ctx_.precision());
  });
}

void Block::AttentionBackward(int l, int B, int T) {
  const jobspec::ActivationLayout& o = ctx_.off();
  const ShardDims& d = ctx_.dims();
  ctx_.Op("attention bwd", [&] {
    ctx_.be().AttentionBackward(H(A(o.dqkv)), A(o.datt), H(A(o.datty)),
                                H(ctx_.LayerAct(l, o.qkv)), H(ctx_.LayerAct(l, o.atty)),
                                ctx_.LayerAct(l, o.att), B, T, d.Ca, d.NH, ctx_.precision());
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
