// The GPT model over the backend interface: GPT-2 and Llama blocks, tensor and sequence
// parallelism, pipeline slots, recompute and profiling, in one class (the MoE layers are
// model/moe_layer.h's, the 16-bit working weights model/working_weights.h's). It is over 700
// lines because that class still does the rest; issue 37 goes on splitting it by collaborator
// (the stack over per-architecture blocks, the tensor- and sequence-parallel helpers).
#include "absl/strings/string_view.h"
#include "model/gpt.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/rng.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/layernorm.h"
#include "kernels/gqa.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"

namespace gantry::model {

namespace k = gantry::kernels;

GPT::GPT(const jobspec::GPTConfig& config, const jobspec::ModelShard& shard, kernels::Backend* backend)
    : config_(config), shard_(shard), be_(backend), tensors_(jobspec::ParameterLayout(config, shard)) {
  if (shard_.layer_end < 0) shard_.layer_end = config.n_layer;
  lb_ = shard_.layer_begin;
  le_ = shard_.layer_end;
  Ca_ = config.n_embd / shard_.tp;
  NHa_ = config.n_head / shard_.tp;
  NKVa_ = config.kv_heads() / shard_.tp;
  hd_ = config.head_dim();
  Fm_ = config.ffn() / shard_.tp;
  v0_ = shard_.vocab_begin(config.vocab_size);
  Vl_ = shard_.vocab_end(config.vocab_size) - v0_;
  // Units: the embedding, each layer, the head (the rest).
  auto at = [&](size_t i) { return i < tensors_.size() ? tensors_[i].offset : tensors_.back().offset + tensors_.back().numel; };
  size_t i = 0;
  unit_begin_ = {0};
  if (shard_.first()) unit_begin_.push_back(at(i += static_cast<size_t>(jobspec::EmbeddingTensors(config))));
  for (int l = lb_; l < le_; ++l) {
    layer_tensor_.push_back(i);
    unit_begin_.push_back(at(i += static_cast<size_t>(jobspec::TensorsOfLayer(config, l, shard_))));
  }
  moe_ = std::make_unique<MoeLayers>(config_, shard_, Fm_, be_, static_cast<MoeHost*>(this));
  if (shard_.last()) unit_begin_.push_back(at(tensors_.size()));
  size_t classifier = 0;  // the index in tensors_ of this shard's classifier rows (a stage with the classifier has them)
  if (const jobspec::ParamTensor* cls = FindTensor(jobspec::ClassifierTensor(config))) {
    classifier = static_cast<size_t>(cls - tensors_.data());
    // The classifier's unit: the first whose range holds it (GPT-2's first stage: the
    // embedding's wte, which it ties).
    while (cls_unit_ + 1 < num_units() && unit_end(cls_unit_) <= cls->offset) ++cls_unit_;
    cls_offset_ = cls->offset - unit_begin(cls_unit_);
  }
  working_ = std::make_unique<WorkingWeights>(be_, &tensors_, config.llama(), classifier);
  const size_t n = num_params();
  params_.Assign(be_, n);
  grads_.Assign(be_, n);
  if (config.llama()) {
    std::vector<float> inv(static_cast<size_t>(hd_ / 2));
    k::rope_inv_freq(inv.data(), hd_, static_cast<float>(config.rope_theta));
    inv_freq_.Assign(be_, inv.size());
    be_->CopyToDevice(inv_freq_.data(), inv.data(), inv.size() * sizeof(float));
  }
}

const float* GPT::HostParams(std::vector<float>* staged) const {
  if (be_->host_addressable()) return params_.data();
  staged->resize(num_params());
  ReadParams(staged->data());
  return staged->data();
}

template <typename F>
void GPT::FillParamsOnHost(F&& fill) {
  MarkParamsChanged();
  if (be_->host_addressable()) {
    fill(params_.data());
    return;
  }
  std::vector<float> host(num_params());
  ReadParams(host.data());
  fill(host.data());
  WriteParams(host.data());
}

const jobspec::ParamTensor* GPT::FindTensor(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

GPT::LayerParams GPT::Layer(float* unit_base, int l) const {
  const size_t i = LayerTensor(l);
  const size_t begin = unit_begin(layer_unit(l));
  auto p = [&](size_t j) { return unit_base + (tensors_[i + j].offset - begin); };
  if (config_.llama()) {
    // input_layernorm, q|k|v (from q), o, post_attention_layernorm, gate|up (from gate), down.
    return {p(0), nullptr, p(1), nullptr, p(4), nullptr, p(5), nullptr, p(6), nullptr, p(8), nullptr};
  }
  if (config_.moe_layer(l)) {  // ln_1 .. ln_2 as a dense layer's, then the router and the experts
    LayerParams lp{p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), nullptr, nullptr, nullptr, nullptr};
    lp.gate = p(8);
    lp.experts = p(9);
    return lp;
  }
  return {p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9), p(10), p(11)};
}

void GPT::InitRandom(uint64_t seed) {
  const float std_base = 0.02f;
  const float std_resid = 0.02f / std::sqrt(2.0f * config_.n_layer);
  // Streams are numbered by the whole model's tensor index.
  const std::vector<jobspec::ParamTensor> all = jobspec::ParameterLayout(config_);
  std::vector<float> whole;
  FillParamsOnHost([&](float* params) {
    for (const jobspec::ParamTensor& t : tensors_) {
      size_t ti = 0;
      while (all[ti].name != t.name) ++ti;
      float* p = params + t.offset;
      const bool is_norm = t.name.find("ln_") != std::string::npos || t.name.find("layernorm") != std::string::npos ||
                           t.name == "model.norm.weight";
      if (is_norm && t.name.ends_with(".weight")) {
        std::fill(p, p + t.numel, 1.0f);
      } else if (t.shape.size() == 1 && t.global_shape.size() == 1) {
        std::fill(p, p + t.numel, 0.0f);
      } else {
        const bool resid = t.name.ends_with("attn.c_proj.weight") || t.name.ends_with("mlp.c_proj.weight");
        const double sd = resid ? std_resid : std_base;
        Rng rng(MixSeed(seed, ti));
        // A shard draws the whole tensor's stream and keeps its block.
        whole.resize(all[ti].numel);
        for (float& x : whole) x = static_cast<float>(rng.Normal() * sd);
        jobspec::ForEachRun(t, [&](int64_t g, int64_t l, int64_t n) { std::copy_n(whole.data() + g, n, p + l); });
      }
    }
  });
}

void GPT::CopyFromWhole(const GPT& whole) {
  std::vector<float> staged;
  const float* all = whole.HostParams(&staged);
  FillParamsOnHost([&](float* params) {
    for (const jobspec::ParamTensor& t : tensors_) {
      const jobspec::ParamTensor* w = whole.FindTensor(t.name);
      const float* src = all + w->offset;
      float* dst = params + t.offset;
      jobspec::ForEachRun(t, [&](int64_t g, int64_t l, int64_t n) { std::copy_n(src + g, n, dst + l); });
    }
  });
}

template <typename F>
void GPT::Op(const char* name, F&& f) {
  if (!profiling_) {
    f();
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  f();
  if (be_->kind() != kernels::BackendKind::kCpu) Sync();  // the op's time, not its launch's
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& [n, t] : op_seconds_) {
    if (n == name) {
      t += dt;
      return;
    }
  }
  op_seconds_.emplace_back(name, dt);
}

void GPT::Round(float* p, size_t n) {
  if (mixed()) be_->RoundTo(p, p, static_cast<int64_t>(n), lp_);
}

GemmOperands GPT::GemmWeights(const LayerParams& w, int l) {
  if (mixed() && config_.moe_layer(l)) {  // the job spec refuses this; a model built directly says so
    if (comm_status_.ok()) comm_status_ = absl::UnimplementedError("a MoE layer in bf16/fp16 is not built yet (fp32 only)");
    return {};
  }
  const float* src[8] = {w.qkvw, w.qkvb, w.projw, w.projb, w.fcw, w.fcb, w.fcprojw, w.fcprojb};
  return working_->Layer(src, LayerTensor(l), gathers());
}

void GPT::ZeroGrad() { be_->Zero(grads_.data(), grads_.size() * sizeof(float)); }

void GPT::Sync() {
  absl::Status s = be_->Synchronize();
  if (!s.ok() && comm_status_.ok()) comm_status_ = std::move(s);
}

void GPT::EnsureActivations(int B, int T) {
  if (B == act_B_ && T == act_T_) return;
  const jobspec::ActivationLayout o = jobspec::LayoutActivations(config_, shard_, B, T, recompute_, be_->fused_attention(), mixed());
  act_.Assign(be_, o.total * static_cast<size_t>(slots_));
  off_ = o;
  act_B_ = B;
  act_T_ = T;
  tokens_per_slot_ = static_cast<size_t>(B) * T;
  static_assert(sizeof(int32_t) == sizeof(float));
  tokens_.Assign(be_, 2 * tokens_per_slot_ * static_cast<size_t>(slots_));
  losses_.resize(tokens_per_slot_);
  Select(0);
}

void GPT::TpAllReduce(float* data, size_t n) {
  if (tp_comm_ == nullptr || shard_.tp == 1) return;
  Sync();  // the communicator reads what the queued ops write
  absl::Status s = tp_comm_->AllReduceSum(data, n);
  if (!s.ok() && comm_status_.ok()) comm_status_ = s;
}

void GPT::TpReduceScatter(const float* in, float* out, size_t n) {
  Sync();
  absl::Status s = tp_comm_ != nullptr ? tp_comm_->ReduceScatterSum(in, out, n)
                                       : absl::FailedPreconditionError("sequence parallelism without a tensor-parallel group");
  if (!s.ok() && comm_status_.ok()) comm_status_ = s;
}

void GPT::TpAllGather(const float* in, float* out, size_t n) {
  Sync();
  absl::Status s = tp_comm_ != nullptr ? tp_comm_->AllGather(in, out, n)
                                       : absl::FailedPreconditionError("sequence parallelism without a tensor-parallel group");
  if (!s.ok() && comm_status_.ok()) comm_status_ = s;
}

kernels::Ptr GPT::AllRows(kernels::Ptr rows, int BT) {
  if (!sp()) return rows;
  const kernels::Ptr all = H(A(off_.gathered));
  // The rows' bytes as floats: 16-bit tensors gather two elements a float (the collectives
  // move the bits; the job spec requires an even n_embd for this).
  const size_t elems = static_cast<size_t>(Rows(BT)) * config_.n_embd;
  if (!rows.f32() && elems % 2 != 0) {
    if (comm_status_.ok()) comm_status_ = absl::InvalidArgumentError("sequence parallelism in 16 bits needs an even rows x n_embd");
    return all;
  }
  Op("sp all-gather", [&] { TpAllGather(static_cast<const float*>(rows.data), all.as_f32(), rows.f32() ? elems : elems / 2); });
  return all;
}

float* GPT::SumPartial(float* partial, int BT, const char* tag) {
  const size_t C = static_cast<size_t>(config_.n_embd);
  if (!sp()) {
    Op(*tag ? tag : "tp all-reduce", [&] { TpAllReduce(partial, static_cast<size_t>(BT) * C); });
    Round(partial, static_cast<size_t>(BT) * C);
    return partial;
  }
  float* rows = A(off_.proj_rows);
  const size_t n = static_cast<size_t>(Rows(BT)) * C;
  Op(*tag ? tag : "sp reduce-scatter", [&] { TpReduceScatter(partial, rows, n); });
  Round(rows, n);
  return rows;
}

kernels::Ptr GPT::DoutAllRows(int BT) {
  float* dres = A(off_.dres);
  const size_t n = static_cast<size_t>(BT) * config_.n_embd;
  if (sp()) {
    Op("sp all-gather", [&] { TpAllGather(dres, A(off_.dres_all), static_cast<size_t>(Rows(BT)) * config_.n_embd); });
    dres = A(off_.dres_all);
  }
  if (!mixed()) return dres;
  const kernels::Ptr dout(A(off_.dres16), lp_);
  be_->Convert(dout, dres, static_cast<int64_t>(n));
  return dout;
}

float* GPT::SumNormGrad(float* dln, int BT) {
  const size_t C = static_cast<size_t>(config_.n_embd);
  if (!sp()) {
    Op("tp all-reduce", [&] { TpAllReduce(dln, static_cast<size_t>(BT) * C); });
    Round(dln, static_cast<size_t>(BT) * C);
    return dln;
  }
  float* rows = A(off_.dln_rows);
  const size_t n = static_cast<size_t>(Rows(BT)) * C;
  Op("sp reduce-scatter", [&] { TpReduceScatter(dln, rows, n); });
  Round(rows, n);
  return rows;
}

float* GPT::NormGrads(float* g, size_t n) {
  if (!sp()) return g;
  be_->Zero(A(off_.dnorm), n * sizeof(float));
  return A(off_.dnorm);
}

void GPT::FinishNormGrads(float* g, size_t n) {
  if (!sp()) return;
  // This micro-batch's part from every rank's rows, summed, then accumulated (the gradient
  // buffer accumulates over micro-batches: summing it whole would count earlier ones tp times).
  Op("sp all-reduce", [&] { TpAllReduce(A(off_.dnorm), n); });
  be_->ResidualForward(g, g, A(off_.dnorm), static_cast<int64_t>(n));
}

void GPT::ForwardLayer(int l, const LayerParams& p, const GemmOperands& w, const float* residual, int B, int T,
                       const char* tag) {
  const int C = config_.n_embd, Ca = Ca_, NH = NHa_, Fm = Fm_;
  const int BT = B * T, R = Rows(BT);
  auto name = [tag](const char* op) { return *tag ? tag : op; };
  // Row-parallel projections: each rank's partial product (fp32), summed over the group, then
  // rounded (autocast's 16-bit output); rank 0 adds the bias. With sequence parallelism the
  // norms and the residual stream run on this rank's R rows.
  const bool bias_here = shard_.tp_rank == 0;
  float* proj = A(off_.proj);
  Op(name("layernorm fwd"), [&] {
    be_->LayerNormForward(H(LayerAct(l, off_.ln1)), LayerAct(l, off_.ln1_mean), LayerAct(l, off_.ln1_rstd), residual,
                          p.ln1w, p.ln1b, R, C);
  });
  const kernels::Ptr ln1 = AllRows(H(LayerAct(l, off_.ln1)), BT);
  Op(name("matmul fwd"), [&] { be_->MatmulForward(H(LayerAct(l, off_.qkv)), ln1, w.qkvw, w.qkvb, BT, C, 3 * Ca); });
  Op(name("attention fwd"), [&] {
    be_->AttentionForward(H(LayerAct(l, off_.atty)), LayerAct(l, off_.att), H(LayerAct(l, off_.qkv)), B, T, Ca, NH,
                          lp_);
  });
  Op(name("matmul fwd"), [&] {
    be_->MatmulForward(proj, H(LayerAct(l, off_.atty)), w.projw, bias_here ? w.projb : nullptr, BT, Ca, C);
  });
  const float* attn = SumPartial(proj, BT, tag);
  Op(name("residual fwd"), [&] {
    be_->ResidualForward(LayerAct(l, off_.res2), residual, attn, static_cast<int64_t>(R) * C);
  });
  Op(name("layernorm fwd"), [&] {
    be_->LayerNormForward(H(LayerAct(l, off_.ln2)), LayerAct(l, off_.ln2_mean), LayerAct(l, off_.ln2_rstd),
                          LayerAct(l, off_.res2), p.ln2w, p.ln2b, R, C);
  });
  const kernels::Ptr ln2 = AllRows(H(LayerAct(l, off_.ln2)), BT);
  if (config_.moe_layer(l)) {
    moe_->Forward(MoeActs(l), MoeWork(), p.gate, p.experts, ln2, BT, proj, tag);
  } else {
    Op(name("matmul+gelu fwd"), [&] {
      be_->MatmulBiasGeluForward(H(LayerAct(l, off_.fch)), H(LayerAct(l, off_.fch_gelu)), ln2, w.fcw, w.fcb, BT, C,
                                 Fm);
    });
    Op(name("matmul fwd"), [&] {
      be_->MatmulForward(proj, H(LayerAct(l, off_.fch_gelu)), w.fcprojw, bias_here ? w.fcprojb : nullptr, BT, Fm, C);
    });
  }
  const float* mlp = SumPartial(proj, BT, tag);
  Op(name("residual fwd"), [&] {
    be_->ResidualForward(LayerAct(l, off_.res3), LayerAct(l, off_.res2), mlp, static_cast<int64_t>(R) * C);
  });
}

MoeActivations GPT::MoeActs(int l) {
  auto i32 = [](float* p) { return reinterpret_cast<int32_t*>(p); };
  MoeActivations m;
  m.probs = LayerAct(l, off_.moe_probs);
  m.lse = LayerAct(l, off_.moe_lse);
  m.weight = LayerAct(l, off_.moe_weight);
  m.stats = LayerAct(l, off_.moe_stats);
  m.choice = i32(LayerAct(l, off_.moe_choice));
  m.slot = i32(LayerAct(l, off_.moe_slot));
  m.counts = i32(LayerAct(l, off_.moe_counts));
  m.x = LayerAct(l, off_.moe_x);
  m.y = LayerAct(l, off_.moe_y);
  m.fch = LayerAct(l, off_.fch);
  m.gelu = LayerAct(l, off_.fch_gelu);
  m.xr = LayerAct(l, off_.moe_xr);
  m.rcounts = i32(LayerAct(l, off_.moe_rcounts));
  return m;
}

MoeScratch GPT::MoeWork() {
  return {A(off_.moe_yr), A(off_.moe_dy),   A(off_.moe_dw),  A(off_.moe_dx),
          A(off_.moe_dlogits), A(off_.dfch), A(off_.moe_dyr), A(off_.moe_dxr)};
}

void GPT::ForwardLlamaLayer(int l, const LayerParams& p, const GemmOperands& w, const float* residual, int B, int T,
                            const char* tag) {
  const int C = config_.n_embd, Ca = Ca_, NH = NHa_, NKV = NKVa_, hd = hd_, Fm = Fm_;
  const int BT = B * T, R = Rows(BT);
  const float eps = static_cast<float>(config_.norm_eps);
  auto name = [tag](const char* op) { return *tag ? tag : op; };
  float* proj = A(off_.proj);
  // The q|k|v projection writes the packed (NH + 2 NKV)·hd rows; RoPE rotates q and k there;
  // with grouped key/value heads they are then repeated into the attention's 3·NH·hd rows.
  const bool grouped = NKV != NH;
  const kernels::Ptr qkvr = H(grouped ? A(off_.qkvr) : LayerAct(l, off_.qkv));
  Op(name("rmsnorm fwd"), [&] {
    be_->RMSNormForward(H(LayerAct(l, off_.ln1)), LayerAct(l, off_.ln1_rstd), residual, p.ln1w, R, C, eps);
  });
  const kernels::Ptr ln1 = AllRows(H(LayerAct(l, off_.ln1)), BT);
  Op(name("matmul fwd"), [&] {
    be_->MatmulForward(qkvr, ln1, w.qkvw, nullptr, BT, C, (NH + 2 * NKV) * hd, k::WeightLayout::kOutIn);
  });
  Op(name("rope fwd"), [&] { be_->RopeApply(qkvr, B, T, NH, NKV, hd, inv_freq_.data(), false); });
  if (grouped) {
    Op(name("gqa expand"), [&] { be_->GqaExpand(H(LayerAct(l, off_.qkv)), qkvr, BT, NH, NKV, hd); });
  }
  Op(name("attention fwd"), [&] {
    be_->AttentionForward(H(LayerAct(l, off_.atty)), LayerAct(l, off_.att), H(LayerAct(l, off_.qkv)), B, T, Ca, NH,
                          lp_);
  });
  Op(name("matmul fwd"), [&] {
    be_->MatmulForward(proj, H(LayerAct(l, off_.atty)), w.projw, nullptr, BT, Ca, C, k::WeightLayout::kOutIn);
  });
  const float* attn = SumPartial(proj, BT, tag);
  Op(name("residual fwd"), [&] {
    be_->ResidualForward(LayerAct(l, off_.res2), residual, attn, static_cast<int64_t>(R) * C);
  });
  Op(name("rmsnorm fwd"), [&] {
    be_->RMSNormForward(H(LayerAct(l, off_.ln2)), LayerAct(l, off_.ln2_rstd), LayerAct(l, off_.res2), p.ln2w, R, C,
                        eps);
  });
  const kernels::Ptr ln2 = AllRows(H(LayerAct(l, off_.ln2)), BT);
  Op(name("matmul fwd"), [&] {
    be_->MatmulForward(H(LayerAct(l, off_.fch)), ln2, w.fcw, nullptr, BT, C, 2 * Fm, k::WeightLayout::kOutIn);
  });
  Op(name("swiglu fwd"), [&] { be_->SwigluForward(H(LayerAct(l, off_.fch_gelu)), H(LayerAct(l, off_.fch)), BT, Fm); });
  Op(name("matmul fwd"), [&] {
    be_->MatmulForward(proj, H(LayerAct(l, off_.fch_gelu)), w.fcprojw, nullptr, BT, Fm, C, k::WeightLayout::kOutIn);
  });
  const float* mlp = SumPartial(proj, BT, tag);
  Op(name("residual fwd"), [&] {
    be_->ResidualForward(LayerAct(l, off_.res3), LayerAct(l, off_.res2), mlp, static_cast<int64_t>(R) * C);
  });
}

void GPT::RunForward(int B, int T) {
  const int C = config_.n_embd;
  const int BT = B * T;
  if (shard_.first()) {
    float* E = UnitParams(0);  // wte's (embed_tokens') rows at E, wpe at E + wpe offset
    // Vocabulary-parallel: each rank embeds the tokens it holds, rank 0 adds the positions
    // (Llama has none: RoPE), the group's sum is the embedding.
    const float* wpe = shard_.tp_rank == 0 && !config_.llama() ? E + tensors_[1].offset : nullptr;
    // With sequence parallelism the sum is reduce-scattered: this rank's rows.
    float* out = sp() ? A(off_.proj) : A(off_.encoded);
    Op("encoder fwd", [&] { be_->EncoderForward(out, SlotTokens(), E, v0_, v0_ + Vl_, wpe, B, T, C); });
    ReleaseUnitParams(0);
    if (sp()) {
      Op("sp reduce-scatter", [&] { TpReduceScatter(out, A(off_.encoded), static_cast<size_t>(Rows(BT)) * C); });
    } else {
      Op("tp all-reduce", [&] { TpAllReduce(out, static_cast<size_t>(BT) * C); });
    }
  }
  const float* residual = A(off_.encoded);
  for (int l = lb_; l < le_; ++l) {
    const LayerParams p = Layer(UnitParams(layer_unit(l)), l);
    if (config_.llama()) {
      ForwardLlamaLayer(l, p, GemmWeights(p, l), residual, B, T, "");
    } else {
      ForwardLayer(l, p, GemmWeights(p, l), residual, B, T, "");
    }
    ReleaseUnitParams(layer_unit(l));
    residual = LayerAct(l, off_.res3);
  }
  if (!shard_.last()) return;
  {
    float* F = UnitParams(head_unit());  // ln_f weight, then bias (Llama: norm's weight)
    // The classifier reads every row: with sequence parallelism the norm's rows are gathered.
    const kernels::Ptr lnf = H(sp() ? A(off_.gathered) : A(off_.lnf));
    const int R = Rows(BT);
    if (config_.llama()) {
      Op("rmsnorm fwd", [&] {
        be_->RMSNormForward(lnf, A(off_.lnf_rstd), residual, F, R, C, static_cast<float>(config_.norm_eps));
      });
    } else {
      Op("layernorm fwd", [&] {
        be_->LayerNormForward(lnf, A(off_.lnf_mean), A(off_.lnf_rstd), residual, F, F + C, R, C);
      });
    }
    ReleaseUnitParams(head_unit());
    if (sp()) {
      const size_t elems = static_cast<size_t>(R) * C;
      Op("sp all-gather", [&] { TpAllGather(lnf.as_f32(), A(off_.lnf), mixed() ? elems / 2 : elems); });
    }
  }
  // Classifier: logits = lnf @ W^T, W this rank's vocabulary rows of the tied wte (Llama's
  // lm_head). W stays acquired until the classifier's backward (or, without one, the end of
  // ForwardStage).
  const kernels::CPtr W = ClassifierWeight(UnitParams(wte_unit()) + wte_offset());
  Op("classifier matmul fwd", [&] {
    be_->MatmulForward(H(A(off_.logits)), H(A(off_.lnf)), W, nullptr, BT, C, Vl_, k::WeightLayout::kOutIn);
  });
}

void GPT::ReadLogits(float* host, size_t row, size_t rows) {
  const size_t n = rows * static_cast<size_t>(Vl_);
  if (!mixed()) {
    be_->CopyToHost(host, logits() + row * static_cast<size_t>(Vl_), n * sizeof(float));
    Sync();
    return;
  }
  // 16-bit logits: widened on the device into the backward scratch dln's room (free between
  // steps), a block of rows at a time.
  const kernels::CPtr all = H(const_cast<float*>(logits()));
  const size_t room = static_cast<size_t>(act_B_) * act_T_ * config_.n_embd;
  for (size_t done = 0; done < n;) {
    const size_t m = std::min(room, n - done);
    be_->Convert(A(off_.dln), all + static_cast<int64_t>(row * static_cast<size_t>(Vl_) + done), static_cast<int64_t>(m));
    be_->CopyToHost(host + done, A(off_.dln), m * sizeof(float));
    done += m;
  }
  Sync();
}

float GPT::MeanLoss(int n) {
  const float* losses = A(off_.losses);
  if (!be_->host_addressable()) {  // read back; on the others the host reads them in place
    be_->CopyToHost(losses_.data(), losses, static_cast<size_t>(n) * sizeof(float));
    losses = losses_.data();
  }
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += losses[i];
  return static_cast<float>(s / n);
}

float GPT::Loss(int B, int T, float dloss) {
  const int BT = B * T;
  const int32_t* targets = SlotTokens() + tokens_per_slot_;
  if (shard_.tp == 1) {
    if (dloss == 0.f) {
      Op("classifier xent fwd", [&] {
        be_->CrossEntropyForward(A(off_.losses), H(A(off_.logits)), targets, BT, config_.vocab_size);
      });
    } else {
      Op("classifier softmax+xent", [&] {
        be_->CrossEntropyFusedForwardBackward(A(off_.losses), H(A(off_.logits)), targets, dloss, BT,
                                              config_.vocab_size);
      });
    }
    return MeanLoss(BT);
  }
  // Vocabulary-parallel: each rank's row statistics, all-gathered, combined in rank order.
  const size_t n = static_cast<size_t>(BT) * 3;
  if (xent_stats_.size() != n * (static_cast<size_t>(shard_.tp) + 1)) {
    xent_stats_.Assign(be_, n * (static_cast<size_t>(shard_.tp) + 1));
  }
  float* mine = xent_stats_.data() + n * static_cast<size_t>(shard_.tp);
  Op("classifier softmax+xent", [&] {
    be_->CrossEntropyShardStats(mine, H(A(off_.logits)), targets, BT, Vl_, v0_);
    if (tp_comm_ != nullptr) {
      Sync();  // the communicator reads the stats
      absl::Status s = tp_comm_->AllGather(mine, xent_stats_.data(), n);
      if (!s.ok() && comm_status_.ok()) comm_status_ = s;
    }
    be_->CrossEntropyShardFinish(A(off_.losses), H(A(off_.logits)), xent_stats_.data(), shard_.tp, targets, dloss,
                                 BT, Vl_, v0_);
  });
  return MeanLoss(BT);
}

float GPT::Forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  return ForwardStage(0, inputs, targets, B, T, 0.f);
}

float GPT::ForwardStage(int slot, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss_scale) {
  EnsureActivations(B, T);
  RefreshWorking();
  Select(slot);
  // The tokens into the backend's memory: the encoder reads the inputs again in backward.
  auto* tokens = reinterpret_cast<int32_t*>(tokens_.data()) + static_cast<size_t>(slot) * 2 * tokens_per_slot_;
  const size_t bytes = static_cast<size_t>(B) * T * sizeof(int32_t);
  if (shard_.first()) be_->CopyToDevice(tokens, inputs, bytes);
  if (shard_.last() && targets != nullptr) be_->CopyToDevice(tokens + tokens_per_slot_, targets, bytes);
  moe_->BeginForward(dloss_scale);
  RunForward(B, T);
  moe_->EndForward();
  float loss = std::numeric_limits<float>::quiet_NaN();
  if (shard_.last()) {
    if (dloss_scale == 0.f) ReleaseUnitParams(wte_unit());  // no backward follows
    // Mean over the B*T tokens, times 1/grad_accum; plus this stage's MoE loss terms.
    if (targets != nullptr) loss = Loss(B, T, dloss_scale / static_cast<float>(B * T)) + moe_->last_loss();
  }
  Sync();
  return loss;
}

const float* GPT::stage_output(int slot) {
  Select(slot);
  return LayerAct(le_ - 1, off_.res3);
}

void GPT::BackwardStage(int slot, int B, int T) {
  Select(slot);
  RunBackward(B, T);
  Sync();
}

float GPT::ForwardBackward(const int32_t* inputs, const int32_t* targets, int B, int T,
                           float dloss_scale) {
  const float loss = ForwardStage(0, inputs, targets, B, T, dloss_scale);
  RunBackward(B, T);
  Sync();
  return loss;
}

void GPT::BackwardLayer(int l, const LayerParams& p, const GemmOperands& w, const LayerParams& g, const float* residual,
                        int B, int T) {
  const int C = config_.n_embd, Ca = Ca_, NH = NHa_, Fm = Fm_;
  const int BT = B * T, R = Rows(BT);
  float* dres = A(off_.dres);
  float* dln = A(off_.dln);
  // Activation checkpointing: what forward did not keep is computed again, as it was.
  if (off_.recompute == jobspec::Recompute::kFull) {
    ForwardLayer(l, p, w, residual, B, T, "recompute fwd");
  } else if (off_.recompute == jobspec::Recompute::kSelective) {
    Op("recompute attention", [&] {
      be_->AttentionForward(H(LayerAct(l, off_.atty)), LayerAct(l, off_.att), H(LayerAct(l, off_.qkv)), B, T, Ca,
                            NH, lp_);
    });
  }
  // dres holds d(res3) (this rank's rows). MLP branch; with 16-bit tensors each gradient
  // reaching one is rounded as that tensor was, and each weight gradient before it is accumulated.
  const kernels::Ptr dout3 = DoutAllRows(BT);
  const kernels::Ptr ln2 = AllRows(H(LayerAct(l, off_.ln2)), BT);
  if (config_.moe_layer(l)) {
    moe_->Backward(MoeActs(l), MoeWork(), p.gate, p.experts, g.gate, g.experts, ln2, dout3, BT, dln);
  } else {
    Op("matmul+gelu bwd", [&] {
      be_->MatmulBackward(H(A(off_.dfch)), g.fcprojw, g.fcprojb, dout3, H(LayerAct(l, off_.fch_gelu)), w.fcprojw, BT,
                          Fm, C, k::WeightLayout::kInOut, H(LayerAct(l, off_.fch)));
    });
    Op("matmul bwd", [&] { be_->MatmulBackward(dln, g.fcw, g.fcb, H(A(off_.dfch)), ln2, w.fcw, BT, C, Fm); });
  }
  // Column-parallel input: each rank's part of d(ln_2 out), summed over the group.
  const float* dln2 = SumNormGrad(dln, BT);
  // d(res2) = d(res3) + ln_2 backward (ln_2's weight and bias are adjacent)
  float* g2 = NormGrads(g.ln2w, 2 * static_cast<size_t>(C));
  Op("layernorm bwd", [&] {
    be_->LayerNormBackward(dres, g2, g2 + C, dln2, LayerAct(l, off_.res2), p.ln2w, LayerAct(l, off_.ln2_mean),
                           LayerAct(l, off_.ln2_rstd), R, C);
  });
  FinishNormGrads(g.ln2w, 2 * static_cast<size_t>(C));
  // Attention branch.
  const kernels::Ptr dout2 = DoutAllRows(BT);
  Op("matmul bwd", [&] {
    be_->MatmulBackward(H(A(off_.datty)), g.projw, g.projb, dout2, H(LayerAct(l, off_.atty)), w.projw, BT, Ca, C);
  });
  Op("attention bwd", [&] {
    be_->AttentionBackward(H(A(off_.dqkv)), A(off_.datt), H(A(off_.datty)), H(LayerAct(l, off_.qkv)),
                           H(LayerAct(l, off_.atty)), LayerAct(l, off_.att), B, T, Ca, NH, lp_);
  });
  const kernels::Ptr ln1 = AllRows(H(LayerAct(l, off_.ln1)), BT);
  Op("matmul bwd", [&] { be_->MatmulBackward(dln, g.qkvw, g.qkvb, H(A(off_.dqkv)), ln1, w.qkvw, BT, C, 3 * Ca); });
  // The key bias's gradient is exactly zero: it adds q·b_k to every score of a row, and
  // softmax ignores a row-constant shift (dL/db_k = Σ_t (Σ_s dS[t,s]) q_t = 0). Computed,
  // it is rounding noise, which AdamW divides by sqrt(v) + eps and turns into steps of
  // order lr that differ with any change of summation order. Its true value is 0.
  be_->Zero(g.qkvb + Ca, static_cast<size_t>(Ca) * sizeof(float));
  const float* dln1 = SumNormGrad(dln, BT);
  // d(residual_in) = d(res2) + ln_1 backward
  float* g1 = NormGrads(g.ln1w, 2 * static_cast<size_t>(C));
  Op("layernorm bwd", [&] {
    be_->LayerNormBackward(dres, g1, g1 + C, dln1, residual, p.ln1w, LayerAct(l, off_.ln1_mean),
                           LayerAct(l, off_.ln1_rstd), R, C);
  });
  FinishNormGrads(g.ln1w, 2 * static_cast<size_t>(C));
}

void GPT::BackwardLlamaLayer(int l, const LayerParams& p, const GemmOperands& w, const LayerParams& g,
                             const float* residual, int B, int T) {
  const int C = config_.n_embd, Ca = Ca_, NH = NHa_, NKV = NKVa_, hd = hd_, Fm = Fm_;
  const int BT = B * T, R = Rows(BT);
  float* dres = A(off_.dres);
  float* dln = A(off_.dln);
  const bool grouped = NKV != NH;
  if (off_.recompute == jobspec::Recompute::kFull) {
    ForwardLlamaLayer(l, p, w, residual, B, T, "recompute fwd");
  } else if (off_.recompute == jobspec::Recompute::kSelective) {
    Op("recompute attention", [&] {
      be_->AttentionForward(H(LayerAct(l, off_.atty)), LayerAct(l, off_.att), H(LayerAct(l, off_.qkv)), B, T, Ca, NH,
                            lp_);
    });
  }
  // dres holds d(res3). MLP branch: down_proj, SwiGLU, gate|up.
  const kernels::Ptr dout3 = DoutAllRows(BT);
  Op("matmul bwd", [&] {
    be_->MatmulBackward(H(A(off_.dswi)), g.fcprojw, nullptr, dout3, H(LayerAct(l, off_.fch_gelu)), w.fcprojw, BT, Fm,
                        C, k::WeightLayout::kOutIn);
  });
  Op("swiglu bwd", [&] { be_->SwigluBackward(H(A(off_.dfch)), H(A(off_.dswi)), H(LayerAct(l, off_.fch)), BT, Fm); });
  const kernels::Ptr ln2 = AllRows(H(LayerAct(l, off_.ln2)), BT);
  Op("matmul bwd", [&] {
    be_->MatmulBackward(dln, g.fcw, nullptr, H(A(off_.dfch)), ln2, w.fcw, BT, C, 2 * Fm, k::WeightLayout::kOutIn);
  });
  const float* dln2 = SumNormGrad(dln, BT);
  float* g2 = NormGrads(g.ln2w, static_cast<size_t>(C));
  Op("rmsnorm bwd", [&] {
    be_->RMSNormBackward(dres, g2, dln2, LayerAct(l, off_.res2), p.ln2w, LayerAct(l, off_.ln2_rstd), R, C);
  });
  FinishNormGrads(g.ln2w, static_cast<size_t>(C));
  // Attention branch: o_proj, attention, the key/value heads' gradients summed over their
  // groups, RoPE's inverse rotation, q|k|v.
  const kernels::Ptr dout2 = DoutAllRows(BT);
  Op("matmul bwd", [&] {
    be_->MatmulBackward(H(A(off_.datty)), g.projw, nullptr, dout2, H(LayerAct(l, off_.atty)), w.projw, BT, Ca, C,
                        k::WeightLayout::kOutIn);
  });
  Op("attention bwd", [&] {
    be_->AttentionBackward(H(A(off_.dqkv)), A(off_.datt), H(A(off_.datty)), H(LayerAct(l, off_.qkv)),
                           H(LayerAct(l, off_.atty)), LayerAct(l, off_.att), B, T, Ca, NH, lp_);
  });
  const kernels::Ptr dqkvr = H(grouped ? A(off_.qkvr) : A(off_.dqkv));
  if (grouped) Op("gqa reduce", [&] { be_->GqaReduce(dqkvr, H(A(off_.dqkv)), BT, NH, NKV, hd); });
  Op("rope bwd", [&] { be_->RopeApply(dqkvr, B, T, NH, NKV, hd, inv_freq_.data(), true); });
  const kernels::Ptr ln1 = AllRows(H(LayerAct(l, off_.ln1)), BT);
  Op("matmul bwd", [&] {
    be_->MatmulBackward(dln, g.qkvw, nullptr, dqkvr, ln1, w.qkvw, BT, C, (NH + 2 * NKV) * hd, k::WeightLayout::kOutIn);
  });
  const float* dln1 = SumNormGrad(dln, BT);
  float* g1 = NormGrads(g.ln1w, static_cast<size_t>(C));
  Op("rmsnorm bwd", [&] {
    be_->RMSNormBackward(dres, g1, dln1, residual, p.ln1w, LayerAct(l, off_.ln1_rstd), R, C);
  });
  FinishNormGrads(g.ln1w, static_cast<size_t>(C));
}

void GPT::RunBackward(int B, int T) {
  const int C = config_.n_embd;
  const int BT = B * T, R = Rows(BT);
  float* dres = A(off_.dres);
  if (shard_.last()) {
    // logits now hold dlogits. Classifier (tied): dlnf = dlogits @ wte, dwte += dlogits^T lnf.
    // On the first stage wte's gradient stays acquired until the encoder's backward adds its part.
    // wte is still held from this micro-batch's forward: acquiring it again gathers nothing.
    float* dE = UnitGrads(wte_unit()) + wte_offset();
    const kernels::CPtr W = ClassifierWeight(UnitParams(wte_unit()) + wte_offset());
    Op("classifier matmul bwd", [&] {
      be_->MatmulBackward(A(off_.dlnf), dE, nullptr, H(A(off_.logits)), H(A(off_.lnf)), W, BT, C, Vl_,
                          k::WeightLayout::kOutIn);
    });
    ReleaseUnitParams(wte_unit());  // this hold, and the forward's
    ReleaseUnitParams(wte_unit());
    const float* dlnf = SumNormGrad(A(off_.dlnf), BT);
    const float* last = LayerAct(le_ - 1, off_.res3);
    be_->Zero(dres, static_cast<size_t>(R) * C * sizeof(float));
    float* F = UnitParams(head_unit());
    float* dF = UnitGrads(head_unit());
    const size_t norm_n = static_cast<size_t>(config_.llama() ? C : 2 * C);  // the final norm's weight (and bias)
    float* dFn = NormGrads(dF, norm_n);
    if (config_.llama()) {
      Op("rmsnorm bwd", [&] { be_->RMSNormBackward(dres, dFn, dlnf, last, F, A(off_.lnf_rstd), R, C); });
    } else {
      Op("layernorm bwd", [&] {
        be_->LayerNormBackward(dres, dFn, dFn + C, dlnf, last, F, A(off_.lnf_mean), A(off_.lnf_rstd), R, C);
      });
    }
    FinishNormGrads(dF, norm_n);
    ReleaseUnitParams(head_unit());
    UnitGradsDone(head_unit());
  }  // else dres holds d(output), from the next stage
  for (int l = le_ - 1; l >= lb_; --l) {
    const int u = layer_unit(l);
    const LayerParams p = Layer(UnitParams(u), l);
    const GemmOperands w = GemmWeights(p, l);
    const LayerParams g = Layer(UnitGrads(u), l);
    const float* residual = l > lb_ ? LayerAct(l - 1, off_.res3) : A(off_.encoded);
    if (config_.llama()) {
      BackwardLlamaLayer(l, p, w, g, residual, B, T);
    } else {
      BackwardLayer(l, p, w, g, residual, B, T);
    }
    ReleaseUnitParams(u);
    UnitGradsDone(u);
  }
  if (!shard_.first()) return;  // dres holds d(input), for the previous stage
  float* dE = UnitGrads(0);
  // The vocabulary-parallel embedding's backward reads every row's gradient.
  const float* dall = dres;
  if (sp()) {
    Op("sp all-gather", [&] { TpAllGather(dres, A(off_.dres_all), static_cast<size_t>(R) * C); });
    dall = A(off_.dres_all);
  }
  Op("encoder bwd", [&] {
    be_->EncoderBackward(dE, config_.llama() ? nullptr : dE + tensors_[1].offset, dall, SlotTokens(), v0_, v0_ + Vl_,
                         B, T, C);
  });
  UnitGradsDone(0);
}

}  // namespace gantry::model
