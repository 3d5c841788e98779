#include "absl/strings/string_view.h"
#include "worker/model/gpt.h"

#include <algorithm>
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

absl::Status GPTConfig::Validate() const {
  auto bad = [](absl::string_view field, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("model.", field, ": ", why));
  };
  if (n_layer < 1) return bad("n_layer", "must be >= 1");
  if (n_head < 1) return bad("n_head", "must be >= 1");
  if (n_embd < 1) return bad("n_embd", "must be >= 1");
  if (n_embd % n_head != 0) {
    return bad("n_embd", absl::StrCat(n_embd, " is not divisible by n_head ", n_head));
  }
  if (vocab_size < 2 || vocab_size > 65536) {
    return bad("vocab_size", absl::StrCat(vocab_size, " outside [2, 65536] (tokens are uint16)"));
  }
  if (max_seq_len < 1) return bad("max_seq_len", "must be >= 1");
  return absl::OkStatus();
}

std::vector<ParamTensor> ParameterLayout(const GPTConfig& c) {
  const int64_t C = c.n_embd;
  std::vector<ParamTensor> t;
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    ParamTensor p;
    p.name = std::move(name);
    p.numel = 1;
    for (int64_t d : shape) p.numel *= static_cast<size_t>(d);
    p.decay = shape.size() >= 2;
    p.shape = std::move(shape);
    p.offset = t.empty() ? 0 : t.back().offset + t.back().numel;
    t.push_back(std::move(p));
  };
  add("wte.weight", {c.vocab_size, C});
  add("wpe.weight", {c.max_seq_len, C});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    add(h + "ln_1.weight", {C});
    add(h + "ln_1.bias", {C});
    add(h + "attn.c_attn.weight", {C, 3 * C});
    add(h + "attn.c_attn.bias", {3 * C});
    add(h + "attn.c_proj.weight", {C, C});
    add(h + "attn.c_proj.bias", {C});
    add(h + "ln_2.weight", {C});
    add(h + "ln_2.bias", {C});
    add(h + "mlp.c_fc.weight", {C, 4 * C});
    add(h + "mlp.c_fc.bias", {4 * C});
    add(h + "mlp.c_proj.weight", {4 * C, C});
    add(h + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", {C});
  add("ln_f.bias", {C});
  return t;
}

std::vector<size_t> UnitBoundaries(const GPTConfig& c) {
  const std::vector<ParamTensor> t = ParameterLayout(c);
  std::vector<size_t> b = {0};
  b.push_back(t[2].offset);  // after wte, wpe
  for (int l = 0; l < c.n_layer; ++l) b.push_back(t[2 + 12 * (l + 1)].offset);
  b.push_back(t.back().offset + t.back().numel);  // ln_f
  return b;
}

GPT::GPT(const GPTConfig& config)
    : config_(config), tensors_(ParameterLayout(config)), unit_begin_(UnitBoundaries(config)) {
  const size_t n = num_params();
  params_.Assign(n);
  grads_.Assign(n);
}

const ParamTensor* GPT::FindTensor(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

GPT::LayerParams GPT::Layer(float* unit_base, int l) const {
  // 12 tensors per layer, after wte and wpe.
  const size_t i = 2 + static_cast<size_t>(l) * 12;
  const size_t begin = unit_begin(1 + l);
  auto p = [&](size_t j) { return unit_base + (tensors_[i + j].offset - begin); };
  return {p(0), p(1), p(2), p(3), p(4), p(5), p(6), p(7), p(8), p(9), p(10), p(11)};
}

void GPT::InitRandom(uint64_t seed) {
  const float std_base = 0.02f;
  const float std_resid = 0.02f / std::sqrt(2.0f * config_.n_layer);
  for (size_t ti = 0; ti < tensors_.size(); ++ti) {
    const ParamTensor& t = tensors_[ti];
    float* p = params_.data() + t.offset;
    const bool is_ln = t.name.find("ln_") != std::string::npos;
    if (is_ln && t.name.ends_with(".weight")) {
      std::fill(p, p + t.numel, 1.0f);
    } else if (t.shape.size() == 1) {
      std::fill(p, p + t.numel, 0.0f);
    } else {
      const bool resid = t.name.ends_with("attn.c_proj.weight") || t.name.ends_with("mlp.c_proj.weight");
      const double sd = resid ? std_resid : std_base;
      Rng rng(MixSeed(seed, ti));
      for (size_t i = 0; i < t.numel; ++i) p[i] = static_cast<float>(rng.Normal() * sd);
    }
  }
}

template <typename F>
void GPT::Op(const char* name, F&& f) {
  if (!profiling_) {
    f();
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& [n, t] : op_seconds_) {
    if (n == name) {
      t += dt;
      return;
    }
  }
  op_seconds_.emplace_back(name, dt);
}

void GPT::ZeroGrad() { std::fill(grads_.begin(), grads_.end(), 0.f); }

ActivationLayout LayoutActivations(const GPTConfig& config, int B, int T, Recompute recompute) {
  const size_t BT = static_cast<size_t>(B) * T;
  const size_t C = config.n_embd, V = config.vocab_size, NH = config.n_head;
  const size_t L = config.n_layer;
  size_t cur = 0;
  auto take = [&](size_t n) {
    const size_t o = cur;
    cur += (n + 15) & ~size_t{15};  // 64-byte aligned sub-buffers
    return o;
  };
  ActivationLayout o{};
  o.encoded = take(BT * C);
  o.lnf = take(BT * C);
  o.lnf_mean = take(BT);
  o.lnf_rstd = take(BT);
  o.logits = take(BT * V);
  o.losses = take(BT);
  o.dres = take(BT * C);
  o.dln = take(BT * C);
  o.dqkv = take(BT * 3 * C);
  o.datty = take(BT * C);
  o.datt = take(static_cast<size_t>(B) * NH * T * T);
  o.dfch = take(BT * 4 * C);
  o.dlnf = take(BT * C);
  // Per-layer block, offsets relative to the block.
  const size_t block_start = cur;
  cur = 0;
  o.ln1 = take(BT * C);
  o.ln1_mean = take(BT);
  o.ln1_rstd = take(BT);
  o.qkv = take(BT * 3 * C);
  o.atty = take(BT * C);
  o.attproj = take(BT * C);
  o.res2 = take(BT * C);
  o.ln2 = take(BT * C);
  o.ln2_mean = take(BT);
  o.ln2_rstd = take(BT);
  o.fch = take(BT * 4 * C);
  o.fch_gelu = take(BT * 4 * C);
  o.fcproj = take(BT * C);
  o.res3 = take(BT * C);
  const size_t without_att = cur;
  o.att = take(static_cast<size_t>(B) * NH * T * T);  // last: kSelective leaves it out
  const size_t whole = cur;
  o.recompute = recompute;
  o.layer0 = block_start;
  if (recompute == Recompute::kFull) {
    o.layer_stride = (BT * C + 15) & ~size_t{15};  // res3 alone
    o.scratch = block_start + L * o.layer_stride;
    o.total = o.scratch + whole;
    return o;
  }
  o.layer_stride = recompute == Recompute::kSelective ? without_att : whole;
  o.scratch = block_start + L * o.layer_stride;
  o.total = o.scratch + (recompute == Recompute::kSelective ? whole - without_att : 0);
  return o;
}

void GPT::EnsureActivations(int B, int T) {
  if (B == act_B_ && T == act_T_) return;
  const ActivationLayout o = LayoutActivations(config_, B, T, recompute_);
  act_.Assign(o.total);
  off_ = o;
  act_B_ = B;
  act_T_ = T;
}

void GPT::ForwardLayer(int l, const LayerParams& w, const float* residual, int B, int T, const char* tag) {
  const int C = config_.n_embd, NH = config_.n_head;
  const int BT = B * T;
  auto name = [tag](const char* op) { return *tag ? tag : op; };
  Op(name("layernorm fwd"), [&] {
    k::layernorm_forward(LayerAct(l, off_.ln1), LayerAct(l, off_.ln1_mean),
                         LayerAct(l, off_.ln1_rstd), residual, w.ln1w, w.ln1b, BT, C);
  });
  Op(name("matmul fwd"), [&] {
    k::matmul_forward(LayerAct(l, off_.qkv), LayerAct(l, off_.ln1), w.qkvw, w.qkvb, BT, C, 3 * C);
  });
  Op(name("attention fwd"), [&] {
    k::attention_forward(LayerAct(l, off_.atty), LayerAct(l, off_.att), LayerAct(l, off_.qkv), B,
                         T, C, NH);
  });
  Op(name("matmul fwd"), [&] {
    k::matmul_forward(LayerAct(l, off_.attproj), LayerAct(l, off_.atty), w.projw, w.projb, BT, C,
                      C);
  });
  Op(name("residual fwd"), [&] {
    k::residual_forward(LayerAct(l, off_.res2), residual, LayerAct(l, off_.attproj),
                        static_cast<int64_t>(BT) * C);
  });
  Op(name("layernorm fwd"), [&] {
    k::layernorm_forward(LayerAct(l, off_.ln2), LayerAct(l, off_.ln2_mean),
                         LayerAct(l, off_.ln2_rstd), LayerAct(l, off_.res2), w.ln2w, w.ln2b, BT, C);
  });
  Op(name("matmul+gelu fwd"), [&] {
    k::matmul_bias_gelu_forward(LayerAct(l, off_.fch), LayerAct(l, off_.fch_gelu),
                                LayerAct(l, off_.ln2), w.fcw, w.fcb, BT, C, 4 * C);
  });
  Op(name("matmul fwd"), [&] {
    k::matmul_forward(LayerAct(l, off_.fcproj), LayerAct(l, off_.fch_gelu), w.fcprojw, w.fcprojb,
                      BT, 4 * C, C);
  });
  Op(name("residual fwd"), [&] {
    k::residual_forward(LayerAct(l, off_.res3), LayerAct(l, off_.res2), LayerAct(l, off_.fcproj),
                        static_cast<int64_t>(BT) * C);
  });
}

void GPT::RunForward(const int32_t* inputs, int B, int T) {
  const int C = config_.n_embd, V = config_.vocab_size;
  const int L = config_.n_layer;
  const int BT = B * T;
  EnsureActivations(B, T);
  inputs_.assign(inputs, inputs + BT);
  {
    float* E = UnitParams(0);  // wte at E, wpe at E + wpe offset
    Op("encoder fwd", [&] { k::encoder_forward(A(off_.encoded), inputs, E, E + tensors_[1].offset, B, T, C); });
    ReleaseUnitParams(0);
  }
  const float* residual = A(off_.encoded);
  for (int l = 0; l < L; ++l) {
    const LayerParams w = Layer(UnitParams(1 + l), l);
    ForwardLayer(l, w, residual, B, T, "");
    ReleaseUnitParams(1 + l);
    residual = LayerAct(l, off_.res3);
  }
  {
    float* F = UnitParams(L + 1);  // ln_f weight, then bias
    Op("layernorm fwd", [&] {
      k::layernorm_forward(A(off_.lnf), A(off_.lnf_mean), A(off_.lnf_rstd), residual, F, F + C, BT, C);
    });
    ReleaseUnitParams(L + 1);
  }
  // Tied classifier: logits = lnf @ wte^T. wte stays acquired for the classifier's backward.
  wte_ = UnitParams(0);
  Op("classifier matmul fwd", [&] {
    k::matmul_forward(A(off_.logits), A(off_.lnf), wte_, nullptr, BT, C, V, k::WeightLayout::kOutIn);
  });
}

static float MeanLoss(const float* losses, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) s += losses[i];
  return static_cast<float>(s / n);
}

float GPT::Forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  RunForward(inputs, B, T);
  ReleaseUnitParams(0);
  if (targets == nullptr) return std::numeric_limits<float>::quiet_NaN();
  Op("classifier xent fwd", [&] {
    k::crossentropy_forward(A(off_.losses), A(off_.logits), targets, B * T, config_.vocab_size);
  });
  return MeanLoss(A(off_.losses), B * T);
}

float GPT::ForwardBackward(const int32_t* inputs, const int32_t* targets, int B, int T,
                           float dloss_scale) {
  RunForward(inputs, B, T);
  const int BT = B * T;
  // Mean over the B*T tokens, times 1/grad_accum.
  const float dloss = dloss_scale / static_cast<float>(BT);
  Op("classifier softmax+xent", [&] {
    k::crossentropy_fused_forward_backward(A(off_.losses), A(off_.logits), targets, dloss, BT,
                                           config_.vocab_size);
  });
  const float loss = MeanLoss(A(off_.losses), BT);
  RunBackward(B, T);
  return loss;
}

void GPT::RunBackward(int B, int T) {
  const int C = config_.n_embd, V = config_.vocab_size, NH = config_.n_head;
  const int L = config_.n_layer;
  const int BT = B * T;
  float* dres = A(off_.dres);
  float* dln = A(off_.dln);
  // logits now hold dlogits. Classifier (tied): dlnf = dlogits @ wte, dwte += dlogits^T lnf.
  // wte's gradient stays acquired until the encoder's backward adds its part.
  float* dE = UnitGrads(0);
  Op("classifier matmul bwd", [&] {
    k::matmul_backward(A(off_.dlnf), dE, nullptr, A(off_.logits), A(off_.lnf), wte_, BT, C, V,
                       k::WeightLayout::kOutIn);
  });
  ReleaseUnitParams(0);
  wte_ = nullptr;
  const float* last = L > 0 ? LayerAct(L - 1, off_.res3) : A(off_.encoded);
  std::fill(dres, dres + static_cast<size_t>(BT) * C, 0.f);
  {
    float* F = UnitParams(L + 1);
    float* dF = UnitGrads(L + 1);
    Op("layernorm bwd", [&] {
      k::layernorm_backward(dres, dF, dF + C, A(off_.dlnf), last, F, A(off_.lnf_mean), A(off_.lnf_rstd), BT, C);
    });
    ReleaseUnitParams(L + 1);
    UnitGradsDone(L + 1);
  }
  for (int l = L - 1; l >= 0; --l) {
    const LayerParams w = Layer(UnitParams(1 + l), l);
    const LayerParams g = Layer(UnitGrads(1 + l), l);
    const float* residual = l > 0 ? LayerAct(l - 1, off_.res3) : A(off_.encoded);
    // Activation checkpointing: what forward did not keep is computed again, as it was.
    if (off_.recompute == Recompute::kFull) {
      ForwardLayer(l, w, residual, B, T, "recompute fwd");
    } else if (off_.recompute == Recompute::kSelective) {
      Op("recompute attention", [&] {
        k::attention_forward(LayerAct(l, off_.atty), LayerAct(l, off_.att), LayerAct(l, off_.qkv), B, T, C, NH);
      });
    }
    // dres holds d(res3). MLP branch.
    Op("matmul+gelu bwd", [&] {
      k::matmul_backward(A(off_.dfch), g.fcprojw, g.fcprojb, dres, LayerAct(l, off_.fch_gelu),
                         w.fcprojw, BT, 4 * C, C, k::WeightLayout::kInOut, LayerAct(l, off_.fch));
    });
    Op("matmul bwd", [&] {
      k::matmul_backward(dln, g.fcw, g.fcb, A(off_.dfch), LayerAct(l, off_.ln2), w.fcw, BT, C,
                         4 * C);
    });
    // d(res2) = d(res3) + ln_2 backward
    Op("layernorm bwd", [&] {
      k::layernorm_backward(dres, g.ln2w, g.ln2b, dln, LayerAct(l, off_.res2), w.ln2w,
                            LayerAct(l, off_.ln2_mean), LayerAct(l, off_.ln2_rstd), BT, C);
    });
    // Attention branch.
    Op("matmul bwd", [&] {
      k::matmul_backward(A(off_.datty), g.projw, g.projb, dres, LayerAct(l, off_.atty), w.projw, BT,
                         C, C);
    });
    Op("attention bwd", [&] {
      k::attention_backward(A(off_.dqkv), A(off_.datt), A(off_.datty), LayerAct(l, off_.qkv),
                            LayerAct(l, off_.att), B, T, C, NH);
    });
    Op("matmul bwd", [&] {
      k::matmul_backward(dln, g.qkvw, g.qkvb, A(off_.dqkv), LayerAct(l, off_.ln1), w.qkvw, BT, C,
                         3 * C);
    });
    // The key bias's gradient is exactly zero: it adds q·b_k to every score of a row, and
    // softmax ignores a row-constant shift (dL/db_k = Σ_t (Σ_s dS[t,s]) q_t = 0). Computed,
    // it is rounding noise, which AdamW divides by sqrt(v) + eps and turns into steps of
    // order lr that differ with any change of summation order. Its true value is 0.
    std::fill(g.qkvb + C, g.qkvb + 2 * C, 0.f);
    // d(residual_in) = d(res2) + ln_1 backward
    Op("layernorm bwd", [&] {
      k::layernorm_backward(dres, g.ln1w, g.ln1b, dln, residual, w.ln1w, LayerAct(l, off_.ln1_mean),
                            LayerAct(l, off_.ln1_rstd), BT, C);
    });
    ReleaseUnitParams(1 + l);
    UnitGradsDone(1 + l);
  }
  Op("encoder bwd", [&] { k::encoder_backward(dE, dE + tensors_[1].offset, dres, inputs_.data(), B, T, C); });
  UnitGradsDone(0);
}

}  // namespace gantry::model
