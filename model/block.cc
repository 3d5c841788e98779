#include "model/block.h"

#include "model/context_parallel.h"
#include "model/gpt2_block.h"
#include "model/llama_block.h"

namespace gantry::model {

namespace k = gantry::kernels;

namespace {
// The ring's heads: the key/value heads as qkv holds them (a Llama's grouped ones under context
// parallelism, whose layout keeps them packed; GPT-2's are its query heads), and their type (in
// bf16 or fp16 the K/V blocks travel in it).
AttentionHeads RingHeads(const RunContext& ctx, int B) {
  const ShardDims& d = ctx.dims();
  return {B, d.NH, ctx.off().grouped_attention ? d.NKV : d.NH, d.hd, 0.f, ctx.precision()};
}
}  // namespace

void Block::AttentionForward(int l, int B, int T, const char* name) {
  const jobspec::ActivationLayout& o = ctx_.off();
  const ShardDims& d = ctx_.dims();
  if (RingAttention* ring = ctx_.ring()) {
    // Context parallelism: this rank's rows against the whole sequence's, K and V round the cp
    // group; `att` holds the rows' log-sum-exps (the layout's fused-attention room), fp32. In
    // bf16 or fp16 the ring reads q|k|v widened and its output is rounded back; the K/V blocks
    // travel in the 16-bit type (RingHeads' kv_type), widened again on arrival.
    const AttentionHeads heads = RingHeads(ctx_, B);
    float *out = ctx_.LayerAct(l, o.atty), *qkv = ctx_.LayerAct(l, o.qkv);
    const int64_t rows = static_cast<int64_t>(B) * T;
    ctx_.Op(name, [&] {
      if (!ctx_.mixed()) {
        ctx_.Fail(ring->Forward(out, ctx_.LayerAct(l, o.att), qkv, heads));
        return;
      }
      float* wide = ctx_.RingScratch(0, static_cast<size_t>(rows * heads.qkv_width()));
      float* wide_out = ctx_.RingScratch(1, static_cast<size_t>(rows * heads.out_width()));
      ctx_.be().Convert(wide, H(qkv), rows * heads.qkv_width());
      ctx_.Fail(ring->Forward(wide_out, ctx_.LayerAct(l, o.att), wide, heads));
      ctx_.be().Convert(H(out), wide_out, rows * heads.out_width());
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
    const AttentionHeads heads = RingHeads(ctx_, B);
    float *dqkv = A(o.dqkv), *dout = A(o.datty), *qkv = ctx_.LayerAct(l, o.qkv), *out = ctx_.LayerAct(l, o.atty);
    const float* lse = ctx_.LayerAct(l, o.att);
    const int64_t rows = static_cast<int64_t>(B) * T, W = heads.qkv_width(), C = heads.out_width();
    ctx_.Op("attention bwd", [&] {
      if (!ctx_.mixed()) {
        ctx_.Fail(ring->Backward(dqkv, dout, qkv, out, lse, heads));
        return;
      }
      // The 16-bit operands widened (the saved, rounded output among them: D = rowsum(dO·O)
      // from what was kept), the gradient rounded back.
      float* wide_qkv = ctx_.RingScratch(0, static_cast<size_t>(rows * W));
      float* wide_out = ctx_.RingScratch(1, static_cast<size_t>(rows * C));
      float* wide_dout = ctx_.RingScratch(2, static_cast<size_t>(rows * C));
      float* wide_dqkv = ctx_.RingScratch(3, static_cast<size_t>(rows * W));
      ctx_.be().Convert(wide_qkv, H(qkv), rows * W);
      ctx_.be().Convert(wide_out, H(out), rows * C);
      ctx_.be().Convert(wide_dout, H(dout), rows * C);
      ctx_.Fail(ring->Backward(wide_dqkv, wide_dout, wide_qkv, wide_out, lse, heads));
      ctx_.be().Convert(H(dqkv), wide_dqkv, rows * W);
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
