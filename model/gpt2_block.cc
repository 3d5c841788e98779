#include "model/gpt2_block.h"

namespace gantry::model {

namespace k = gantry::kernels;

LayerParams Gpt2Block::Bind(int l, const std::function<float*(size_t)>& p) const {
  if (ctx_.config().moe_layer(l)) {  // ln_1 .. ln_2 as a dense layer's, then the router and the experts
    LayerParams lp{p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), nullptr, nullptr, nullptr, nullptr};
    lp.gate = p(8);
    lp.experts = p(9);
    return lp;
  }
  return {p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9), p(10), p(11)};
}

void Gpt2Block::Forward(int l, const LayerParams& p, const GemmOperands& w, const float* residual, int B, int T,
                        const char* tag, const NormOut* next, bool normed) {
  const jobspec::ActivationLayout& o = ctx_.off();
  const ShardDims& d = ctx_.dims();
  const int C = d.C, Ca = d.Ca, Fm = d.Fm;
  const int BT = B * T, R = tp_.Rows(BT);
  k::Backend& be = ctx_.be();
  auto L = [&](size_t off) { return ctx_.LayerAct(l, off); };
  auto name = [tag](const char* op) { return *tag ? tag : op; };
  // Row-parallel projections: each rank's partial product (fp32), summed over the group, then
  // rounded (autocast's 16-bit output); rank 0 adds the bias. With sequence parallelism the
  // norms and the residual stream run on this rank's R rows.
  const bool bias_here = ctx_.shard().tp_rank == 0;
  float* proj = A(o.proj);
  if (!normed) NormForward(InputNorm(l, p), residual, R, tag);
  const k::Ptr ln1 = tp_.AllRows(H(L(o.ln1)), BT);
  ctx_.Op(name("matmul fwd"), [&] { be.MatmulForward(H(L(o.qkv)), ln1, w.qkvw, w.qkvb, BT, C, 3 * Ca); });
  AttentionForward(l, B, T, name("attention fwd"));
  ctx_.Op(name("matmul fwd"),
          [&] { be.MatmulForward(proj, H(L(o.atty)), w.projw, bias_here ? w.projb : nullptr, BT, Ca, C); });
  const float* attn = tp_.SumPartial(proj, BT, tag);
  const NormOut ln_2{H(L(o.ln2)), L(o.ln2_mean), L(o.ln2_rstd), p.ln2w, p.ln2b};
  ResidualForward(L(o.res2), residual, attn, &ln_2, R, tag);
  const k::Ptr ln2 = tp_.AllRows(H(L(o.ln2)), BT);
  if (ctx_.config().moe_layer(l)) {
    moe_->Forward(MoeActs(l), MoeWork(), p.gate, p.experts, ln2, BT, proj, tag);
  } else {
    ctx_.Op(name("matmul+gelu fwd"),
            [&] { be.MatmulBiasGeluForward(H(L(o.fch)), H(L(o.fch_gelu)), ln2, w.fcw, w.fcb, BT, C, Fm); });
    ctx_.Op(name("matmul fwd"),
            [&] { be.MatmulForward(proj, H(L(o.fch_gelu)), w.fcprojw, bias_here ? w.fcprojb : nullptr, BT, Fm, C); });
  }
  const float* mlp = tp_.SumPartial(proj, BT, tag);
  ResidualForward(ctx_.LayerOutput(l), L(o.res2), mlp, next, R, tag);
}

NormOut Gpt2Block::InputNorm(int l, const LayerParams& p) const {
  const jobspec::ActivationLayout& o = ctx_.off();
  return {H(ctx_.LayerAct(l, o.ln1)), ctx_.LayerAct(l, o.ln1_mean), ctx_.LayerAct(l, o.ln1_rstd), p.ln1w, p.ln1b};
}

NormOut Gpt2Block::FinalNorm(kernels::Ptr out, const float* F) const {
  const jobspec::ActivationLayout& o = ctx_.off();
  return {out, A(o.lnf_mean), A(o.lnf_rstd), F, F + ctx_.dims().C};
}

void Gpt2Block::NormForward(const NormOut& n, const float* in, int R, const char* tag) {
  ctx_.Op(*tag ? tag : "layernorm fwd",
          [&] { ctx_.be().LayerNormForward(n.out, n.mean, n.rstd, in, n.w, n.b, R, ctx_.dims().C); });
}

void Gpt2Block::ResidualNormForward(float* sum, const float* a, const float* b, const NormOut& n, int R,
                                    const char* tag) {
  ctx_.Op(*tag ? tag : "residual+layernorm fwd", [&] {
    ctx_.be().ResidualLayerNormForward(sum, n.out, n.mean, n.rstd, a, b, n.w, n.b, R, ctx_.dims().C);
  });
}

void Gpt2Block::Backward(int l, const LayerParams& p, const GemmOperands& w, const LayerParams& g,
                         const float* residual, int B, int T) {
  const jobspec::ActivationLayout& o = ctx_.off();
  const ShardDims& d = ctx_.dims();
  const int C = d.C, Ca = d.Ca, Fm = d.Fm;
  const int BT = B * T, R = tp_.Rows(BT);
  k::Backend& be = ctx_.be();
  auto L = [&](size_t off) { return ctx_.LayerAct(l, off); };
  float* dres = A(o.dres);
  float* dln = A(o.dln);
  Recompute(l, B, T, [&] { Forward(l, p, w, residual, B, T, "recompute fwd", nullptr, false); });
  // dres holds d(res3) (this rank's rows). MLP branch; with 16-bit tensors each gradient
  // reaching one is rounded as that tensor was, and each weight gradient before it is accumulated.
  const k::Ptr dout3 = tp_.DoutAllRows(BT);
  const k::Ptr ln2 = tp_.AllRows(H(L(o.ln2)), BT);
  if (ctx_.config().moe_layer(l)) {
    moe_->Backward(MoeActs(l), MoeWork(), p.gate, p.experts, g.gate, g.experts, ln2, dout3, BT, dln);
  } else {
    // The fc bias's gradient (d(fch)'s column sums) comes with d(fch), from the call that makes it.
    ctx_.Op("matmul+gelu bwd", [&] {
      be.MatmulBackward(H(A(o.dfch)), g.fcprojw, g.fcprojb, dout3, H(L(o.fch_gelu)), w.fcprojw, BT, Fm, C,
                        k::WeightLayout::kInOut, H(L(o.fch)), g.fcb);
    });
    ctx_.Op("matmul bwd",
            [&] { be.MatmulBackward(tp_.NormGradOut(dln), g.fcw, nullptr, H(A(o.dfch)), ln2, w.fcw, BT, C, Fm); });
  }
  // Column-parallel input: each rank's part of d(ln_2 out), summed over the group.
  const k::CPtr dln2 = tp_.NormGradIn(dln, BT);
  // d(res2) = d(res3) + ln_2 backward (ln_2's weight and bias are adjacent)
  float* g2 = tp_.NormGrads(g.ln2w, 2 * static_cast<size_t>(C));
  ctx_.Op("layernorm bwd", [&] {
    be.LayerNormBackward(dres, g2, g2 + C, dln2, L(o.res2), p.ln2w, L(o.ln2_mean), L(o.ln2_rstd), R, C,
                         tp_.Dres16Out());
  });
  tp_.FinishNormGrads(g.ln2w, 2 * static_cast<size_t>(C));
  // Attention branch.
  const k::Ptr dout2 = tp_.DoutAllRows(BT);
  ctx_.Op("matmul bwd",
          [&] { be.MatmulBackward(H(A(o.datty)), g.projw, g.projb, dout2, H(L(o.atty)), w.projw, BT, Ca, C); });
  AttentionBackward(l, B, T);
  const k::Ptr ln1 = tp_.AllRows(H(L(o.ln1)), BT);
  ctx_.Op("matmul bwd", [&] {
    be.MatmulBackward(tp_.NormGradOut(dln), g.qkvw, g.qkvb, H(A(o.dqkv)), ln1, w.qkvw, BT, C, 3 * Ca);
  });
  // The key bias's gradient is exactly zero: it adds q·b_k to every score of a row, and
  // softmax ignores a row-constant shift (dL/db_k = Σ_t (Σ_s dS[t,s]) q_t = 0). Computed,
  // it is rounding noise, which AdamW divides by sqrt(v) + eps and turns into steps of
  // order lr that differ with any change of summation order. Its true value is 0.
  be.Zero(g.qkvb + Ca, static_cast<size_t>(Ca) * sizeof(float));
  const k::CPtr dln1 = tp_.NormGradIn(dln, BT);
  // d(residual_in) = d(res2) + ln_1 backward
  float* g1 = tp_.NormGrads(g.ln1w, 2 * static_cast<size_t>(C));
  ctx_.Op("layernorm bwd", [&] {
    be.LayerNormBackward(dres, g1, g1 + C, dln1, residual, p.ln1w, L(o.ln1_mean), L(o.ln1_rstd), R, C,
                         tp_.Dres16Out());
  });
  tp_.FinishNormGrads(g.ln1w, 2 * static_cast<size_t>(C));
}

void Gpt2Block::FinalNormBackward(float* din, float* dF, k::CPtr dout, const float* in, const float* F, int R,
                                  k::Ptr din16) {
  const jobspec::ActivationLayout& o = ctx_.off();
  const int C = ctx_.dims().C;
  ctx_.Op("layernorm bwd", [&] {
    ctx_.be().LayerNormBackward(din, dF, dF + C, dout, in, F, ctx_.A(o.lnf_mean), ctx_.A(o.lnf_rstd), R, C, din16);
  });
}

MoeActivations Gpt2Block::MoeActs(int l) const {
  const jobspec::ActivationLayout& o = ctx_.off();
  auto L = [&](size_t off) { return ctx_.LayerAct(l, off); };
  auto i32 = [](float* p) { return reinterpret_cast<int32_t*>(p); };
  MoeActivations m;
  m.probs = L(o.moe_probs);
  m.lse = L(o.moe_lse);
  m.weight = L(o.moe_weight);
  m.stats = L(o.moe_stats);
  m.choice = i32(L(o.moe_choice));
  m.slot = i32(L(o.moe_slot));
  m.counts = i32(L(o.moe_counts));
  m.x = L(o.moe_x);
  m.y = L(o.moe_y);
  m.fch = L(o.fch);
  m.gelu = L(o.fch_gelu);
  m.xr = L(o.moe_xr);
  m.rcounts = i32(L(o.moe_rcounts));
  return m;
}

MoeScratch Gpt2Block::MoeWork() const {
  const jobspec::ActivationLayout& o = ctx_.off();
  return {A(o.moe_yr), A(o.moe_dy), A(o.moe_dw), A(o.moe_dx), A(o.moe_dlogits), A(o.dfch), A(o.moe_dyr), A(o.moe_dxr)};
}

}  // namespace gantry::model
