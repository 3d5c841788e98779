#include "model/llama_block.h"

#include <vector>

#include "kernels/rope.h"

namespace gantry::model {

namespace k = gantry::kernels;

LlamaBlock::LlamaBlock(RunContext* ctx, TensorParallel* tp) : Block(ctx, tp) {
  const int hd = ctx_.dims().hd;
  std::vector<float> inv(static_cast<size_t>(hd / 2));
  k::rope_inv_freq(inv.data(), hd, static_cast<float>(ctx_.config().rope_theta));
  inv_freq_.Assign(&ctx_.be(), inv.size());
  ctx_.be().CopyToDevice(inv_freq_.data(), inv.data(), inv.size() * sizeof(float));
}

LayerParams LlamaBlock::Bind(int, const std::function<float*(size_t)>& p) const {
  // input_layernorm, q|k|v (from q), o, post_attention_layernorm, gate|up (from gate), down.
  return {p(0), nullptr, p(1), nullptr, p(4), nullptr, p(5), nullptr, p(6), nullptr, p(8), nullptr};
}

void LlamaBlock::Forward(int l, const LayerParams& p, const GemmOperands& w, const float* residual, int B, int T,
                         const char* tag, const NormOut* next, bool normed) {
  const jobspec::ActivationLayout& o = ctx_.off();
  const ShardDims& d = ctx_.dims();
  const int C = d.C, Ca = d.Ca, NH = d.NH, NKV = d.NKV, hd = d.hd, Fm = d.Fm;
  const int BT = B * T, R = tp_.Rows(BT);
  k::Backend& be = ctx_.be();
  auto L = [&](size_t off) { return ctx_.LayerAct(l, off); };
  auto name = [tag](const char* op) { return *tag ? tag : op; };
  float* proj = A(o.proj);
  // The q|k|v projection writes the packed (NH + 2 NKV)·hd rows; RoPE rotates q and k there;
  // with grouped key/value heads they are then repeated into the attention's 3·NH·hd rows,
  // unless the backend's attention reads them as they are (then they are qkv itself).
  const k::Ptr qkvr = H(repeats() ? A(o.qkvr) : L(o.qkv));
  if (!normed) NormForward(InputNorm(l, p), residual, R, tag);
  const k::Ptr ln1 = tp_.AllRows(H(L(o.ln1)), BT);
  ctx_.Op(name("matmul fwd"),
          [&] { be.MatmulForward(qkvr, ln1, w.qkvw, nullptr, BT, C, (NH + 2 * NKV) * hd, k::WeightLayout::kOutIn); });
  ctx_.Op(name("rope fwd"), [&] { Rope(qkvr, B, T, false); });
  if (repeats()) ctx_.Op(name("gqa expand"), [&] { be.GqaExpand(H(L(o.qkv)), qkvr, BT, NH, NKV, hd); });
  AttentionForward(l, B, T, name("attention fwd"));
  ctx_.Op(name("matmul fwd"),
          [&] { be.MatmulForward(proj, H(L(o.atty)), w.projw, nullptr, BT, Ca, C, k::WeightLayout::kOutIn); });
  const float* attn = tp_.SumPartial(proj, BT, tag);
  const NormOut norm2{H(L(o.ln2)), nullptr, L(o.ln2_rstd), p.ln2w, nullptr};
  ResidualForward(L(o.res2), residual, attn, &norm2, R, tag);
  const k::Ptr ln2 = tp_.AllRows(H(L(o.ln2)), BT);
  ctx_.Op(name("matmul fwd"),
          [&] { be.MatmulForward(H(L(o.fch)), ln2, w.fcw, nullptr, BT, C, 2 * Fm, k::WeightLayout::kOutIn); });
  ctx_.Op(name("swiglu fwd"), [&] { be.SwigluForward(H(L(o.fch_gelu)), H(L(o.fch)), BT, Fm); });
  ctx_.Op(name("matmul fwd"),
          [&] { be.MatmulForward(proj, H(L(o.fch_gelu)), w.fcprojw, nullptr, BT, Fm, C, k::WeightLayout::kOutIn); });
  const float* mlp = tp_.SumPartial(proj, BT, tag);
  ResidualForward(ctx_.LayerOutput(l), L(o.res2), mlp, next, R, tag);
}

void LlamaBlock::Rope(kernels::Ptr qkv, int B, int T, bool inverse) {
  const ShardDims& d = ctx_.dims();
  if (const int32_t* positions = ctx_.positions()) {
    // Context parallelism: this rank's rows at their global positions.
    ctx_.be().RopeApplyAt(qkv, B, T, positions, d.NH, d.NKV, d.hd, inv_freq_.data(), inverse);
    return;
  }
  ctx_.be().RopeApply(qkv, B, T, d.NH, d.NKV, d.hd, inv_freq_.data(), inverse);
}

NormOut LlamaBlock::InputNorm(int l, const LayerParams& p) const {
  const jobspec::ActivationLayout& o = ctx_.off();
  return {H(ctx_.LayerAct(l, o.ln1)), nullptr, ctx_.LayerAct(l, o.ln1_rstd), p.ln1w, nullptr};
}

NormOut LlamaBlock::FinalNorm(kernels::Ptr out, const float* F) const {
  return {out, nullptr, A(ctx_.off().lnf_rstd), F, nullptr};
}

void LlamaBlock::NormForward(const NormOut& n, const float* in, int R, const char* tag) {
  ctx_.Op(*tag ? tag : "rmsnorm fwd",
          [&] { ctx_.be().RMSNormForward(n.out, n.rstd, in, n.w, R, ctx_.dims().C, eps()); });
}

void LlamaBlock::ResidualNormForward(float* sum, const float* a, const float* b, const NormOut& n, int R,
                                     const char* tag) {
  ctx_.Op(*tag ? tag : "residual+rmsnorm fwd",
          [&] { ctx_.be().ResidualRMSNormForward(sum, n.out, n.rstd, a, b, n.w, R, ctx_.dims().C, eps()); });
}

void LlamaBlock::Backward(int l, const LayerParams& p, const GemmOperands& w, const LayerParams& g,
                          const float* residual, int B, int T) {
  const jobspec::ActivationLayout& o = ctx_.off();
  const ShardDims& d = ctx_.dims();
  const int C = d.C, Ca = d.Ca, NH = d.NH, NKV = d.NKV, hd = d.hd, Fm = d.Fm;
  const int BT = B * T, R = tp_.Rows(BT);
  k::Backend& be = ctx_.be();
  auto L = [&](size_t off) { return ctx_.LayerAct(l, off); };
  float* dres = A(o.dres);
  float* dln = A(o.dln);
  Recompute(l, B, T, [&] { Forward(l, p, w, residual, B, T, "recompute fwd", nullptr, false); });
  // dres holds d(res3). MLP branch: down_proj, SwiGLU, gate|up.
  const k::Ptr dout3 = tp_.DoutAllRows(BT);
  ctx_.Op("matmul bwd", [&] {
    be.MatmulBackward(H(A(o.dswi)), g.fcprojw, nullptr, dout3, H(L(o.fch_gelu)), w.fcprojw, BT, Fm, C,
                      k::WeightLayout::kOutIn);
  });
  ctx_.Op("swiglu bwd", [&] { be.SwigluBackward(H(A(o.dfch)), H(A(o.dswi)), H(L(o.fch)), BT, Fm); });
  const k::Ptr ln2 = tp_.AllRows(H(L(o.ln2)), BT);
  ctx_.Op("matmul bwd", [&] {
    be.MatmulBackward(tp_.NormGradOut(dln), g.fcw, nullptr, H(A(o.dfch)), ln2, w.fcw, BT, C, 2 * Fm,
                      k::WeightLayout::kOutIn);
  });
  const k::CPtr dln2 = tp_.NormGradIn(dln, BT);
  float* g2 = tp_.NormGrads(g.ln2w, static_cast<size_t>(C));
  ctx_.Op("rmsnorm bwd", [&] {
    be.RMSNormBackward(dres, g2, dln2, L(o.res2), p.ln2w, L(o.ln2_rstd), R, C, tp_.Dres16Out());
  });
  tp_.FinishNormGrads(g.ln2w, static_cast<size_t>(C));
  // Attention branch: o_proj, attention, the key/value heads' gradients summed over their
  // groups (by the attention itself where it reads grouped heads), RoPE's inverse rotation, q|k|v.
  const k::Ptr dout2 = tp_.DoutAllRows(BT);
  ctx_.Op("matmul bwd", [&] {
    be.MatmulBackward(H(A(o.datty)), g.projw, nullptr, dout2, H(L(o.atty)), w.projw, BT, Ca, C,
                      k::WeightLayout::kOutIn);
  });
  AttentionBackward(l, B, T);
  const k::Ptr dqkvr = H(repeats() ? A(o.qkvr) : A(o.dqkv));
  if (repeats()) ctx_.Op("gqa reduce", [&] { be.GqaReduce(dqkvr, H(A(o.dqkv)), BT, NH, NKV, hd); });
  ctx_.Op("rope bwd", [&] { Rope(dqkvr, B, T, true); });
  const k::Ptr ln1 = tp_.AllRows(H(L(o.ln1)), BT);
  ctx_.Op("matmul bwd", [&] {
    be.MatmulBackward(tp_.NormGradOut(dln), g.qkvw, nullptr, dqkvr, ln1, w.qkvw, BT, C, (NH + 2 * NKV) * hd,
                      k::WeightLayout::kOutIn);
  });
  const k::CPtr dln1 = tp_.NormGradIn(dln, BT);
  float* g1 = tp_.NormGrads(g.ln1w, static_cast<size_t>(C));
  ctx_.Op("rmsnorm bwd", [&] {
    be.RMSNormBackward(dres, g1, dln1, residual, p.ln1w, L(o.ln1_rstd), R, C, tp_.Dres16Out());
  });
  tp_.FinishNormGrads(g.ln1w, static_cast<size_t>(C));
}

void LlamaBlock::FinalNormBackward(float* din, float* dF, k::CPtr dout, const float* in, const float* F, int R,
                                   k::Ptr din16) {
  ctx_.Op("rmsnorm bwd", [&] {
    ctx_.be().RMSNormBackward(din, dF, dout, in, F, ctx_.A(ctx_.off().lnf_rstd), R, ctx_.dims().C, din16);
  });
}

}  // namespace gantry::model
