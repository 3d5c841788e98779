#include "absl/strings/string_view.h"
#include "worker/model/gpt.h"

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
#include "kernels/matmul.h"
#include "kernels/residual.h"

namespace gantry::model {

namespace k = gantry::kernels;

GPT::GPT(const GPTConfig& config, const ModelShard& shard, kernels::Backend* backend)
    : config_(config), shard_(shard), be_(backend), tensors_(ParameterLayout(config, shard)) {
  if (shard_.layer_end < 0) shard_.layer_end = config.n_layer;
  lb_ = shard_.layer_begin;
  le_ = shard_.layer_end;
  Ca_ = config.n_embd / shard_.tp;
  NHa_ = config.n_head / shard_.tp;
  Fm_ = 4 * config.n_embd / shard_.tp;
  v0_ = shard_.vocab_begin(config.vocab_size);
  Vl_ = shard_.vocab_end(config.vocab_size) - v0_;
  // Units: the embedding (2 tensors), each layer (12), the head (the rest).
  auto at = [&](size_t i) { return i < tensors_.size() ? tensors_[i].offset : tensors_.back().offset + tensors_.back().numel; };
  size_t i = 0;
  unit_begin_ = {0};
  if (shard_.first()) unit_begin_.push_back(at(i += 2));
  for (int l = lb_; l < le_; ++l) unit_begin_.push_back(at(i += 12));
  if (shard_.last()) unit_begin_.push_back(at(tensors_.size()));
  const size_t n = num_params();
  params_.Assign(be_, n);
  grads_.Assign(be_, n);
}

const float* GPT::HostParams(std::vector<float>* staged) const {
  if (be_->host_addressable()) return params_.data();
  staged->resize(num_params());
  ReadParams(staged->data());
  return staged->data();
}

template <typename F>
void GPT::FillParamsOnHost(F&& fill) {
  if (be_->host_addressable()) {
    fill(params_.data());
    return;
  }
  std::vector<float> host(num_params());
  ReadParams(host.data());
  fill(host.data());
  WriteParams(host.data());
}

const ParamTensor* GPT::FindTensor(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

GPT::LayerParams GPT::Layer(float* unit_base, int l) const {
  // 12 tensors per layer, after wte and wpe on the first stage.
  const size_t i = (shard_.first() ? 2 : 0) + static_cast<size_t>(l - lb_) * 12;
  const size_t begin = unit_begin(layer_unit(l));
  auto p = [&](size_t j) { return unit_base + (tensors_[i + j].offset - begin); };
  return {p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9), p(10), p(11)};
}

void GPT::InitRandom(uint64_t seed) {
  const float std_base = 0.02f;
  const float std_resid = 0.02f / std::sqrt(2.0f * config_.n_layer);
  // Streams are numbered by the whole model's tensor index.
  const std::vector<ParamTensor> all = ParameterLayout(config_);
  std::vector<float> whole;
  FillParamsOnHost([&](float* params) {
    for (const ParamTensor& t : tensors_) {
      size_t ti = 0;
      while (all[ti].name != t.name) ++ti;
      float* p = params + t.offset;
      const bool is_ln = t.name.find("ln_") != std::string::npos;
      if (is_ln && t.name.ends_with(".weight")) {
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
        ForEachRun(t, [&](int64_t g, int64_t l, int64_t n) { std::copy_n(whole.data() + g, n, p + l); });
      }
    }
  });
}

void GPT::CopyFromWhole(const GPT& whole) {
  std::vector<float> staged;
  const float* all = whole.HostParams(&staged);
  FillParamsOnHost([&](float* params) {
    for (const ParamTensor& t : tensors_) {
      const ParamTensor* w = whole.FindTensor(t.name);
      const float* src = all + w->offset;
      float* dst = params + t.offset;
      ForEachRun(t, [&](int64_t g, int64_t l, int64_t n) { std::copy_n(src + g, n, dst + l); });
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

namespace {
// The GEMM tensors of a layer (weights and biases; not LayerNorm's), and their places among
// its 12 tensors.
constexpr int kGemmTensors = 8;
constexpr int kGemmAt[kGemmTensors] = {2, 3, 4, 5, 8, 9, 10, 11};
}  // namespace

size_t GPT::GemmFloats(int l, size_t sizes[]) const {
  const size_t first = (shard_.first() ? 2 : 0) + static_cast<size_t>(l - lb_) * 12;
  size_t total = 0;
  for (int i = 0; i < kGemmTensors; ++i) total += sizes[i] = tensors_[first + kGemmAt[i]].numel;
  return total;
}

std::array<float**, 8> GPT::GemmFields(LayerParams& p) {
  return {&p.qkvw, &p.qkvb, &p.projw, &p.projb, &p.fcw, &p.fcb, &p.fcprojw, &p.fcprojb};
}

GPT::LayerParams GPT::GemmWeights(const LayerParams& w, int l) {
  if (!mixed()) return w;
  LayerParams r = w;
  const std::array<float**, kGemmTensors> gemm = GemmFields(r);
  size_t sizes[kGemmTensors];
  const size_t total = GemmFloats(l, sizes);
  if (lp_layer_.size() != total) lp_layer_.Assign(be_, total, /*zero=*/false);
  float* out = lp_layer_.data();
  for (int i = 0; i < kGemmTensors; ++i) {
    be_->RoundTo(out, *gemm[i], static_cast<int64_t>(sizes[i]), lp_);
    *gemm[i] = out;
    out += sizes[i];
  }
  return r;
}

GPT::LayerParams GPT::GemmGrads(const LayerParams& g, int l) {
  if (!mixed()) return g;
  LayerParams r = g;
  const std::array<float**, kGemmTensors> gemm = GemmFields(r);
  size_t sizes[kGemmTensors];
  const size_t total = GemmFloats(l, sizes);
  if (lp_grad_.size() != total) lp_grad_.Assign(be_, total, /*zero=*/false);
  be_->Zero(lp_grad_.data(), total * sizeof(float));
  float* out = lp_grad_.data();
  for (int i = 0; i < kGemmTensors; ++i) {
    *gemm[i] = out;
    out += sizes[i];
  }
  return r;
}

void GPT::AddGemmGrads(const LayerParams& g, int l) {
  if (!mixed()) return;
  LayerParams r = g;
  const std::array<float**, kGemmTensors> gemm = GemmFields(r);
  size_t sizes[kGemmTensors];
  const size_t total = GemmFloats(l, sizes);
  Round(lp_grad_.data(), total);
  const float* in = lp_grad_.data();
  for (int i = 0; i < kGemmTensors; ++i) {
    be_->ResidualForward(*gemm[i], *gemm[i], in, static_cast<int64_t>(sizes[i]));
    in += sizes[i];
  }
}

const float* GPT::ClassifierWeight(const float* W) {
  if (!mixed()) return W;
  const size_t n = static_cast<size_t>(Vl_) * config_.n_embd;
  if (lp_wte_.size() != n) lp_wte_.Assign(be_, n, /*zero=*/false);
  be_->RoundTo(lp_wte_.data(), W, static_cast<int64_t>(n), lp_);
  return lp_wte_.data();
}

void GPT::ZeroGrad() { be_->Zero(grads_.data(), grads_.size() * sizeof(float)); }

void GPT::Sync() {
  absl::Status s = be_->Synchronize();
  if (!s.ok() && comm_status_.ok()) comm_status_ = std::move(s);
}

void GPT::EnsureActivations(int B, int T) {
  if (B == act_B_ && T == act_T_) return;
  const ActivationLayout o = LayoutActivations(config_, shard_, B, T, recompute_, be_->fused_attention());
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

void GPT::ForwardLayer(int l, const LayerParams& w, const float* residual, int B, int T, const char* tag) {
  const int C = config_.n_embd, Ca = Ca_, NH = NHa_, Fm = Fm_;
  const int BT = B * T;
  auto name = [tag](const char* op) { return *tag ? tag : op; };
  // Row-parallel projections: each rank's partial product, summed over the group; rank 0
  // adds the bias.
  const bool bias_here = shard_.tp_rank == 0;
  Op(name("layernorm fwd"), [&] {
    be_->LayerNormForward(LayerAct(l, off_.ln1), LayerAct(l, off_.ln1_mean),
                         LayerAct(l, off_.ln1_rstd), residual, w.ln1w, w.ln1b, BT, C);
    Round(LayerAct(l, off_.ln1), static_cast<size_t>(BT) * C);
  });
  Op(name("matmul fwd"), [&] {
    be_->MatmulForward(LayerAct(l, off_.qkv), LayerAct(l, off_.ln1), w.qkvw, w.qkvb, BT, C, 3 * Ca);
    Round(LayerAct(l, off_.qkv), static_cast<size_t>(BT) * 3 * Ca);
  });
  Op(name("attention fwd"), [&] {
    be_->AttentionForward(LayerAct(l, off_.atty), LayerAct(l, off_.att), LayerAct(l, off_.qkv), B, T, Ca, NH, lp_);
    Round(LayerAct(l, off_.atty), static_cast<size_t>(BT) * Ca);
  });
  Op(name("matmul fwd"), [&] {
    be_->MatmulForward(LayerAct(l, off_.attproj), LayerAct(l, off_.atty), w.projw, bias_here ? w.projb : nullptr,
                      BT, Ca, C);
  });
  Op(name("tp all-reduce"), [&] { TpAllReduce(LayerAct(l, off_.attproj), static_cast<size_t>(BT) * C); });
  Round(LayerAct(l, off_.attproj), static_cast<size_t>(BT) * C);
  Op(name("residual fwd"), [&] {
    be_->ResidualForward(LayerAct(l, off_.res2), residual, LayerAct(l, off_.attproj),
                        static_cast<int64_t>(BT) * C);
  });
  Op(name("layernorm fwd"), [&] {
    be_->LayerNormForward(LayerAct(l, off_.ln2), LayerAct(l, off_.ln2_mean),
                         LayerAct(l, off_.ln2_rstd), LayerAct(l, off_.res2), w.ln2w, w.ln2b, BT, C);
    Round(LayerAct(l, off_.ln2), static_cast<size_t>(BT) * C);
  });
  Op(name("matmul+gelu fwd"), [&] {
    if (!mixed()) {
      be_->MatmulBiasGeluForward(LayerAct(l, off_.fch), LayerAct(l, off_.fch_gelu), LayerAct(l, off_.ln2), w.fcw,
                                 w.fcb, BT, C, Fm);
      return;
    }
    // Autocast rounds the GEMM's output, then GELU's: not fused.
    const size_t n = static_cast<size_t>(BT) * Fm;
    be_->MatmulForward(LayerAct(l, off_.fch), LayerAct(l, off_.ln2), w.fcw, w.fcb, BT, C, Fm);
    Round(LayerAct(l, off_.fch), n);
    be_->GeluForward(LayerAct(l, off_.fch_gelu), LayerAct(l, off_.fch), static_cast<int64_t>(n));
    Round(LayerAct(l, off_.fch_gelu), n);
  });
  Op(name("matmul fwd"), [&] {
    be_->MatmulForward(LayerAct(l, off_.fcproj), LayerAct(l, off_.fch_gelu), w.fcprojw,
                      bias_here ? w.fcprojb : nullptr, BT, Fm, C);
  });
  Op(name("tp all-reduce"), [&] { TpAllReduce(LayerAct(l, off_.fcproj), static_cast<size_t>(BT) * C); });
  Round(LayerAct(l, off_.fcproj), static_cast<size_t>(BT) * C);
  Op(name("residual fwd"), [&] {
    be_->ResidualForward(LayerAct(l, off_.res3), LayerAct(l, off_.res2), LayerAct(l, off_.fcproj),
                        static_cast<int64_t>(BT) * C);
  });
}

void GPT::RunForward(int B, int T) {
  const int C = config_.n_embd;
  const int BT = B * T;
  if (shard_.first()) {
    float* E = UnitParams(0);  // wte's rows at E, wpe at E + wpe offset
    // Vocabulary-parallel: each rank embeds the tokens it holds, rank 0 adds the positions,
    // the group's sum is the embedding.
    const float* wpe = shard_.tp_rank == 0 ? E + tensors_[1].offset : nullptr;
    Op("encoder fwd", [&] {
      be_->EncoderForward(A(off_.encoded), SlotTokens(), E, v0_, v0_ + Vl_, wpe, B, T, C);
    });
    ReleaseUnitParams(0);
    Op("tp all-reduce", [&] { TpAllReduce(A(off_.encoded), static_cast<size_t>(BT) * C); });
  }
  const float* residual = A(off_.encoded);
  for (int l = lb_; l < le_; ++l) {
    const LayerParams w = GemmWeights(Layer(UnitParams(layer_unit(l)), l), l);
    ForwardLayer(l, w, residual, B, T, "");
    ReleaseUnitParams(layer_unit(l));
    residual = LayerAct(l, off_.res3);
  }
  if (!shard_.last()) return;
  {
    float* F = UnitParams(head_unit());  // ln_f weight, then bias
    Op("layernorm fwd", [&] {
      be_->LayerNormForward(A(off_.lnf), A(off_.lnf_mean), A(off_.lnf_rstd), residual, F, F + C, BT, C);
      Round(A(off_.lnf), static_cast<size_t>(BT) * C);
    });
    ReleaseUnitParams(head_unit());
  }
  // Tied classifier: logits = lnf @ wte^T (this rank's vocabulary rows). wte stays acquired
  // until the classifier's backward (or, without one, the end of ForwardStage).
  const float* W = ClassifierWeight(UnitParams(wte_unit()) + wte_offset());
  Op("classifier matmul fwd", [&] {
    be_->MatmulForward(A(off_.logits), A(off_.lnf), W, nullptr, BT, C, Vl_, k::WeightLayout::kOutIn);
    Round(A(off_.logits), static_cast<size_t>(BT) * Vl_);
  });
}

void GPT::ReadLogits(float* host, size_t row, size_t rows) {
  be_->CopyToHost(host, logits() + row * static_cast<size_t>(Vl_), rows * static_cast<size_t>(Vl_) * sizeof(float));
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
        be_->CrossEntropyForward(A(off_.losses), A(off_.logits), targets, BT, config_.vocab_size);
      });
    } else {
      Op("classifier softmax+xent", [&] {
        be_->CrossEntropyFusedForwardBackward(A(off_.losses), A(off_.logits), targets, dloss, BT,
                                               config_.vocab_size);
        Round(A(off_.logits), static_cast<size_t>(BT) * Vl_);  // d(logits), the gradient of a 16-bit tensor
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
    be_->CrossEntropyShardStats(mine, A(off_.logits), targets, BT, Vl_, v0_);
    if (tp_comm_ != nullptr) {
      Sync();  // the communicator reads the stats
      absl::Status s = tp_comm_->AllGather(mine, xent_stats_.data(), n);
      if (!s.ok() && comm_status_.ok()) comm_status_ = s;
    }
    be_->CrossEntropyShardFinish(A(off_.losses), A(off_.logits), xent_stats_.data(), shard_.tp, targets, dloss, BT,
                                 Vl_, v0_);
    if (dloss != 0.f) Round(A(off_.logits), static_cast<size_t>(BT) * Vl_);
  });
  return MeanLoss(BT);
}

float GPT::Forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  return ForwardStage(0, inputs, targets, B, T, 0.f);
}

float GPT::ForwardStage(int slot, const int32_t* inputs, const int32_t* targets, int B, int T, float dloss_scale) {
  EnsureActivations(B, T);
  Select(slot);
  // The tokens into the backend's memory: the encoder reads the inputs again in backward.
  auto* tokens = reinterpret_cast<int32_t*>(tokens_.data()) + static_cast<size_t>(slot) * 2 * tokens_per_slot_;
  const size_t bytes = static_cast<size_t>(B) * T * sizeof(int32_t);
  if (shard_.first()) be_->CopyToDevice(tokens, inputs, bytes);
  if (shard_.last() && targets != nullptr) be_->CopyToDevice(tokens + tokens_per_slot_, targets, bytes);
  RunForward(B, T);
  float loss = std::numeric_limits<float>::quiet_NaN();
  if (shard_.last()) {
    if (dloss_scale == 0.f) ReleaseUnitParams(wte_unit());  // no backward follows
    // Mean over the B*T tokens, times 1/grad_accum.
    if (targets != nullptr) loss = Loss(B, T, dloss_scale / static_cast<float>(B * T));
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

void GPT::RunBackward(int B, int T) {
  const int C = config_.n_embd, Ca = Ca_, NH = NHa_, Fm = Fm_;
  const int BT = B * T;
  float* dres = A(off_.dres);
  float* dln = A(off_.dln);
  if (shard_.last()) {
    // logits now hold dlogits. Classifier (tied): dlnf = dlogits @ wte, dwte += dlogits^T lnf.
    // On the first stage wte's gradient stays acquired until the encoder's backward adds its part.
    // wte is still held from this micro-batch's forward: acquiring it again gathers nothing.
    float* dE = UnitGrads(wte_unit()) + wte_offset();
    const float* W = ClassifierWeight(UnitParams(wte_unit()) + wte_offset());
    Op("classifier matmul bwd", [&] {
      if (!mixed()) {
        be_->MatmulBackward(A(off_.dlnf), dE, nullptr, A(off_.logits), A(off_.lnf), W, BT, C, Vl_,
                            k::WeightLayout::kOutIn);
        return;
      }
      // The weight's gradient of this micro-batch is a 16-bit tensor (autocast's), rounded
      // before it joins the fp32 accumulation.
      const size_t n = static_cast<size_t>(Vl_) * C;
      if (lp_grad_wte_.size() != n) lp_grad_wte_.Assign(be_, n, /*zero=*/false);
      be_->Zero(lp_grad_wte_.data(), n * sizeof(float));
      be_->MatmulBackward(A(off_.dlnf), lp_grad_wte_.data(), nullptr, A(off_.logits), A(off_.lnf), W, BT, C, Vl_,
                          k::WeightLayout::kOutIn);
      Round(lp_grad_wte_.data(), n);
      be_->ResidualForward(dE, dE, lp_grad_wte_.data(), static_cast<int64_t>(n));
    });
    ReleaseUnitParams(wte_unit());  // this hold, and the forward's
    ReleaseUnitParams(wte_unit());
    Op("tp all-reduce", [&] { TpAllReduce(A(off_.dlnf), static_cast<size_t>(BT) * C); });
    Round(A(off_.dlnf), static_cast<size_t>(BT) * C);
    const float* last = LayerAct(le_ - 1, off_.res3);
    be_->Zero(dres, static_cast<size_t>(BT) * C * sizeof(float));
    float* F = UnitParams(head_unit());
    float* dF = UnitGrads(head_unit());
    Op("layernorm bwd", [&] {
      be_->LayerNormBackward(dres, dF, dF + C, A(off_.dlnf), last, F, A(off_.lnf_mean), A(off_.lnf_rstd), BT, C);
    });
    ReleaseUnitParams(head_unit());
    UnitGradsDone(head_unit());
  }  // else dres holds d(output), from the next stage
  for (int l = le_ - 1; l >= lb_; --l) {
    const int u = layer_unit(l);
    const LayerParams w = GemmWeights(Layer(UnitParams(u), l), l);
    const LayerParams g_acc = Layer(UnitGrads(u), l);
    // Mixed precision: this micro-batch's GEMM gradients apart, rounded, then accumulated.
    const LayerParams g = GemmGrads(g_acc, l);
    const float* residual = l > lb_ ? LayerAct(l - 1, off_.res3) : A(off_.encoded);
    // Activation checkpointing: what forward did not keep is computed again, as it was.
    if (off_.recompute == Recompute::kFull) {
      ForwardLayer(l, w, residual, B, T, "recompute fwd");
    } else if (off_.recompute == Recompute::kSelective) {
      Op("recompute attention", [&] {
        be_->AttentionForward(LayerAct(l, off_.atty), LayerAct(l, off_.att), LayerAct(l, off_.qkv), B, T, Ca, NH,
                              lp_);
        Round(LayerAct(l, off_.atty), static_cast<size_t>(BT) * Ca);
      });
    }
    // Mixed precision: the gradient reaching a 16-bit tensor is rounded as that tensor was;
    // the residual stream's (dres) stays fp32, so the GEMMs read a rounded copy of it (in dln,
    // free until they write it).
    const float* dout = dres;
    if (mixed()) {
      be_->RoundTo(dln, dres, static_cast<int64_t>(BT) * C, lp_);
      dout = dln;
    }
    // dres holds d(res3). MLP branch.
    Op("matmul+gelu bwd", [&] {
      if (!mixed()) {
        be_->MatmulBackward(A(off_.dfch), g.fcprojw, g.fcprojb, dres, LayerAct(l, off_.fch_gelu), w.fcprojw, BT, Fm,
                            C, k::WeightLayout::kInOut, LayerAct(l, off_.fch));
        return;
      }
      const size_t n = static_cast<size_t>(BT) * Fm;
      be_->MatmulBackward(A(off_.dfch), g.fcprojw, g.fcprojb, dout, LayerAct(l, off_.fch_gelu), w.fcprojw, BT, Fm, C);
      Round(A(off_.dfch), n);
      be_->GeluBackward(A(off_.dfch), LayerAct(l, off_.fch), A(off_.dfch), static_cast<int64_t>(n));
      Round(A(off_.dfch), n);
    });
    Op("matmul bwd", [&] {
      be_->MatmulBackward(dln, g.fcw, g.fcb, A(off_.dfch), LayerAct(l, off_.ln2), w.fcw, BT, C, Fm);
    });
    // Column-parallel input: each rank's part of d(ln_2 out), summed over the group.
    Op("tp all-reduce", [&] { TpAllReduce(dln, static_cast<size_t>(BT) * C); });
    Round(dln, static_cast<size_t>(BT) * C);
    // d(res2) = d(res3) + ln_2 backward
    Op("layernorm bwd", [&] {
      be_->LayerNormBackward(dres, g.ln2w, g.ln2b, dln, LayerAct(l, off_.res2), w.ln2w,
                            LayerAct(l, off_.ln2_mean), LayerAct(l, off_.ln2_rstd), BT, C);
    });
    // Attention branch.
    if (mixed()) be_->RoundTo(dln, dres, static_cast<int64_t>(BT) * C, lp_);
    Op("matmul bwd", [&] {
      be_->MatmulBackward(A(off_.datty), g.projw, g.projb, dout, LayerAct(l, off_.atty), w.projw, BT, Ca, C);
      Round(A(off_.datty), static_cast<size_t>(BT) * Ca);
    });
    Op("attention bwd", [&] {
      be_->AttentionBackward(A(off_.dqkv), A(off_.datt), A(off_.datty), LayerAct(l, off_.qkv),
                             LayerAct(l, off_.atty), LayerAct(l, off_.att), B, T, Ca, NH);
      Round(A(off_.dqkv), static_cast<size_t>(BT) * 3 * Ca);
    });
    Op("matmul bwd", [&] {
      be_->MatmulBackward(dln, g.qkvw, g.qkvb, A(off_.dqkv), LayerAct(l, off_.ln1), w.qkvw, BT, C,
                         3 * Ca);
    });
    // The key bias's gradient is exactly zero: it adds q·b_k to every score of a row, and
    // softmax ignores a row-constant shift (dL/db_k = Σ_t (Σ_s dS[t,s]) q_t = 0). Computed,
    // it is rounding noise, which AdamW divides by sqrt(v) + eps and turns into steps of
    // order lr that differ with any change of summation order. Its true value is 0.
    AddGemmGrads(g_acc, l);
    be_->Zero(g_acc.qkvb + Ca, static_cast<size_t>(Ca) * sizeof(float));
    Op("tp all-reduce", [&] { TpAllReduce(dln, static_cast<size_t>(BT) * C); });
    Round(dln, static_cast<size_t>(BT) * C);
    // d(residual_in) = d(res2) + ln_1 backward
    Op("layernorm bwd", [&] {
      be_->LayerNormBackward(dres, g.ln1w, g.ln1b, dln, residual, w.ln1w, LayerAct(l, off_.ln1_mean),
                            LayerAct(l, off_.ln1_rstd), BT, C);
    });
    ReleaseUnitParams(u);
    UnitGradsDone(u);
  }
  if (!shard_.first()) return;  // dres holds d(input), for the previous stage
  float* dE = UnitGrads(0);
  Op("encoder bwd", [&] {
    be_->EncoderBackward(dE, dE + tensors_[1].offset, dres, SlotTokens(), v0_, v0_ + Vl_, B, T, C);
  });
  UnitGradsDone(0);
}

}  // namespace gantry::model
