// The mixture-of-experts GPT against its PyTorch reference (tests/reference/make_fixtures.py
// --only moe; the semantics in docs/architecture.md, "Mixture of experts"), top-1 with capacity
// drops and top-2 dropless: the routing (which experts, which assignments dropped), the
// logits, the loss and its parts, every gradient, and 10 AdamW steps with clipping, in fp32
// against a float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/grad_norm.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "model/gpt.h"
#include "optim/adamw.h"

namespace gantry::model {
namespace {

using testing::F32;
using testing::I32;
using testing::RelErr;

// The parameter: the variant's key prefix ("top1", "top2").
class MoeReferenceTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    fx_ = std::make_unique<SafetensorsFile>(testing::OpenFixture("moe_tiny.safetensors"));
    p_ = std::string(GetParam()) + ".";
    const auto cfg = nlohmann::json::parse(fx_->metadata().at(p_ + "config"));
    config_.vocab_size = cfg["vocab_size"];
    config_.max_seq_len = cfg["n_positions"];
    config_.n_layer = cfg["n_layer"];
    config_.n_head = cfg["n_head"];
    config_.n_embd = cfg["n_embd"];
    const auto& m = cfg["moe"];
    config_.moe = {m["num_experts"], m["top_k"], m["capacity_factor"], m["aux_loss_coeff"], m["z_loss_coeff"],
                   m["every_n_layers"]};
    ASSERT_TRUE(config_.Validate().ok()) << config_.Validate();
    B_ = cfg["batch"];
    T_ = cfg["T"];
    ASSERT_EQ(jobspec::MoeCapacity(config_.moe, B_ * T_), m["capacity"].get<int>() > 0 ? m["capacity"].get<int>() : B_ * T_);
    hp_ = nlohmann::json::parse(fx_->metadata().at(p_ + "hparams"));
    model_ = std::make_unique<GPT>(config_);
    for (const auto& t : model_->tensors()) {
      ASSERT_TRUE(fx_->ReadF32Into(p_ + "param." + t.name, t.shape, model_->params() + t.offset).ok()) << t.name;
    }
    inputs_ = I32(*fx_, p_ + "inputs");
    targets_ = I32(*fx_, p_ + "targets");
  }
  // The reference's routing of one step: (layers, E) tokens per expert and the dropped
  // assignments, summed over the MoE layers as the model's stats are.
  void ExpectRouting(const MoeStats& s, const std::vector<int32_t>& per_expert, const std::vector<int32_t>& dropped,
                     const std::string& what) {
    const int E = config_.moe.num_experts;
    std::vector<int64_t> want(static_cast<size_t>(E), 0);
    for (size_t i = 0; i < per_expert.size(); ++i) want[i % E] += per_expert[i];
    int64_t want_dropped = 0;
    for (int32_t d : dropped) want_dropped += d;
    EXPECT_EQ(s.tokens_per_expert, want) << what;
    EXPECT_EQ(s.dropped, want_dropped) << what;
    EXPECT_EQ(s.assignments, int64_t{B_} * T_ * config_.moe.top_k * config_.moe_layers()) << what;
  }
  std::unique_ptr<SafetensorsFile> fx_;
  std::string p_;
  jobspec::GPTConfig config_;
  int B_ = 0, T_ = 0;
  nlohmann::json hp_;
  std::unique_ptr<GPT> model_;
  std::vector<int32_t> inputs_, targets_;
};

// The model's tensors are the reference's: the router and each expert under their names.
TEST_P(MoeReferenceTest, TensorsAreTheReferences) {
  size_t numel = 0, n = 0;
  for (const auto& [name, info] : fx_->tensors()) n += name.rfind(p_ + "param.", 0) == 0;
  for (const auto& t : model_->tensors()) numel += t.numel;
  EXPECT_EQ(model_->tensors().size(), n);
  EXPECT_EQ(model_->num_params(), numel);
  EXPECT_NE(model_->FindTensor("h.1.mlp.gate.weight"), nullptr);
  EXPECT_NE(model_->FindTensor("h.3.mlp.experts.3.c_proj.bias"), nullptr);
  EXPECT_EQ(model_->FindTensor("h.1.mlp.c_fc.weight"), nullptr) << "layer 1 is a MoE layer";
  EXPECT_NE(model_->FindTensor("h.0.mlp.c_fc.weight"), nullptr) << "layer 0 is dense";
}

// Forward: the routing exactly (the fixture keeps every top-k margin above 1e-4, so fp32 and
// float64 choose alike), the logits and the loss within 1e-5 (the fp32 chain of
// gpt2_tiny's, about 50 u), the load-balancing and z losses likewise.
TEST_P(MoeReferenceTest, RoutingLogitsAndLossMatchTorch) {
  model_->ZeroGrad();
  const float loss = model_->ForwardBackward(inputs_.data(), targets_.data(), B_, T_, 1.0f);
  const MoeStats s = model_->TakeMoeStats();
  ExpectRouting(s, I32(*fx_, p_ + "tokens_per_expert"), I32(*fx_, p_ + "dropped"), "step 0");
  if (config_.moe.capacity_factor > 0) {
    EXPECT_GT(s.dropped, 0) << "the fixture's capacity drops some";
  }
  // logits() holds dlogits after a backward: the logits come from a forward alone.
  const float fwd_loss = model_->Forward(inputs_.data(), targets_.data(), B_, T_);
  auto want = F32(*fx_, p_ + "logits");
  const double err = RelErr(model_->logits(), want.data(), want.size());
  if (std::getenv("GANTRY_VERBOSE")) std::printf("%s logits rel err %.3g\n", GetParam(), err);
  EXPECT_LE(err, 1e-5);
  EXPECT_EQ(fwd_loss, loss) << "a forward alone gives the training forward's loss";
  const float want_loss = F32(*fx_, p_ + "loss")[0];
  EXPECT_LE(std::fabs(loss - want_loss) / want_loss, 1e-5) << loss << " vs " << want_loss;
  EXPECT_LE(std::fabs(s.aux - F32(*fx_, p_ + "aux_loss")[0]) / F32(*fx_, p_ + "aux_loss")[0], 1e-5) << s.aux;
  EXPECT_LE(std::fabs(s.z - F32(*fx_, p_ + "z_loss")[0]) / F32(*fx_, p_ + "z_loss")[0], 1e-5) << s.z;
  const double moe_terms = config_.moe.aux_loss_coeff * s.aux + config_.moe.z_loss_coeff * s.z;
  EXPECT_LE(std::fabs(loss - moe_terms - F32(*fx_, p_ + "ce_loss")[0]), 1e-5 * want_loss) << "the cross entropy";
}

// Every gradient of the total loss, held as gpt2_tiny's are (2^-17 of the tensor's largest,
// model_reference_test derives it): the router's (through the weights, the load-balancing and
// the z losses), each expert's from its own tokens, and an expert that kept none gets zero.
TEST_P(MoeReferenceTest, EveryGradientMatchesTorch) {
  model_->ZeroGrad();
  model_->ForwardBackward(inputs_.data(), targets_.data(), B_, T_, 1.0f);
  for (const auto& t : model_->tensors()) {
    auto want = F32(*fx_, p_ + "grad." + t.name);
    ASSERT_EQ(want.size(), t.numel) << t.name;
    const double err = RelErr(model_->grads() + t.offset, want.data(), t.numel);
    if (std::getenv("GANTRY_VERBOSE")) std::printf("%-32s grad rel err %.3g\n", t.name.c_str(), err);
    EXPECT_LE(err, 0x1p-17) << t.name;
  }
}

// Ten AdamW steps with clipping, routing afresh each step: the routing of every step exactly,
// each step's loss within 1e-5, and the parameters after the 10th within 1e-5 of the reference
// norm-wise over the model (torch's own fp32 run: 9.5e-7). Elementwise, the keys' share of
// c_attn.bias follows rounding noise (its gradient is exactly 0; model_reference_test says
// why), so the parameters are held as a whole, not per element.
TEST_P(MoeReferenceTest, TenAdamWStepsWithClippingMatchTorch) {
  const size_t n = model_->num_params();
  optim::AdamW opt(model_->tensors(), n,
                   {hp_["beta1"].get<float>(), hp_["beta2"].get<float>(), hp_["eps"].get<float>(),
                    hp_["weight_decay"].get<float>()});
  const auto want_losses = F32(*fx_, p_ + "train_losses");
  const auto per_expert = I32(*fx_, p_ + "train_tokens_per_expert");
  const auto dropped = I32(*fx_, p_ + "train_dropped");
  const int L = config_.moe_layers(), E = config_.moe.num_experts;
  const float clip = hp_["grad_clip"].get<float>();
  for (int step = 1; step <= 10; ++step) {
    model_->ZeroGrad();
    const float loss = model_->ForwardBackward(inputs_.data(), targets_.data(), B_, T_, 1.0f);
    const std::string what = "step " + std::to_string(step);
    ExpectRouting(model_->TakeMoeStats(),
                  {per_expert.begin() + (step - 1) * L * E, per_expert.begin() + step * L * E},
                  {dropped.begin() + (step - 1) * L, dropped.begin() + step * L}, what);
    EXPECT_LE(std::fabs(loss - want_losses[step - 1]) / want_losses[step - 1], 1e-5) << what;
    const float coef = kernels::clip_coefficient(std::sqrt(kernels::sum_squares(model_->grads(), n)), clip);
    if (step == 1) {
      EXPECT_LT(coef, 1.0f) << "the fixture's clip must be active";
    }
    kernels::scale_inplace(model_->grads(), n, coef);
    opt.Step(model_->params(), model_->grads(), hp_["lr"].get<double>(), step);
  }
  double num = 0, den = 0;
  for (const auto& t : model_->tensors()) {
    auto want = F32(*fx_, p_ + "step10." + t.name);
    for (size_t i = 0; i < t.numel; ++i) {
      const double d = double(model_->params()[t.offset + i]) - want[i];
      num += d * d;
      den += double(want[i]) * want[i];
    }
  }
  const double err = std::sqrt(num / den);
  if (std::getenv("GANTRY_VERBOSE")) std::printf("%s params after 10 steps rel err %.3g\n", GetParam(), err);
  EXPECT_LE(err, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Variants, MoeReferenceTest, ::testing::Values("top1", "top2"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace gantry::model
