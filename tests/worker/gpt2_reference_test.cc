// The whole GPT-2 against PyTorch (tests/reference/make_fixtures.py): logits, loss, every
// parameter's gradient, and 5 AdamW steps with clipping, in fp32 against a float64 reference.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "kernels/grad_norm.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "worker/model/gpt.h"
#include "worker/train/optimizer.h"

namespace gantry::model {
namespace {

using testing::F32;
using testing::I32;
using testing::RelErr;

class Gpt2ReferenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fx_ = std::make_unique<SafetensorsFile>(testing::OpenFixture("gpt2_tiny.safetensors"));
    auto cfg = nlohmann::json::parse(fx_->metadata().at("config"));
    config_.vocab_size = cfg["vocab_size"];
    config_.max_seq_len = cfg["n_positions"];
    config_.n_layer = cfg["n_layer"];
    config_.n_head = cfg["n_head"];
    config_.n_embd = cfg["n_embd"];
    T_ = cfg["T"];
    B_ = cfg["batch"];
    hp_ = nlohmann::json::parse(fx_->metadata().at("hparams"));
    model_ = std::make_unique<GPT>(config_);
    for (const auto& t : model_->tensors()) {
      ASSERT_TRUE(fx_->ReadF32Into("param." + t.name, t.shape, model_->params() + t.offset).ok()) << t.name;
    }
    inputs_ = I32(*fx_, "inputs");
    targets_ = I32(*fx_, "targets");
  }
  std::unique_ptr<SafetensorsFile> fx_;
  GPTConfig config_;
  int B_ = 0, T_ = 0;
  nlohmann::json hp_;
  std::unique_ptr<GPT> model_;
  std::vector<int32_t> inputs_, targets_;
};

TEST_F(Gpt2ReferenceTest, LogitsAndLossMatchTorch) {
  const float loss = model_->Forward(inputs_.data(), targets_.data(), B_, T_);
  auto want = F32(*fx_, "logits");
  const double err = RelErr(model_->logits(), want.data(), want.size());
  if (std::getenv("GANTRY_VERBOSE")) std::printf("logits rel err %.3g\n", err);
  EXPECT_LE(err, 1e-5);
  const float want_loss = F32(*fx_, "loss")[0];
  EXPECT_LE(std::fabs(loss - want_loss) / want_loss, 1e-5) << loss << " vs " << want_loss;
}

TEST_F(Gpt2ReferenceTest, EveryGradientMatchesTorch) {
  model_->ZeroGrad();
  model_->ForwardBackward(inputs_.data(), targets_.data(), B_, T_, 1.0f);
  for (const auto& t : model_->tensors()) {
    auto want = F32(*fx_, "grad." + t.name);
    ASSERT_EQ(want.size(), t.numel) << t.name;
    const double err = RelErr(model_->grads() + t.offset, want.data(), t.numel);
    if (std::getenv("GANTRY_VERBOSE")) std::printf("%-28s grad rel err %.3g\n", t.name.c_str(), err);
    EXPECT_LE(err, 1e-4) << t.name;
  }
}

TEST_F(Gpt2ReferenceTest, FiveAdamWStepsWithClippingMatchTorch) {
  train::AdamW opt(model_->tensors(), model_->num_params(),
                   {hp_["beta1"].get<double>(), hp_["beta2"].get<double>(), hp_["eps"].get<double>(),
                    hp_["weight_decay"].get<double>()});
  auto want_losses = F32(*fx_, "train_losses");
  const float clip = hp_["grad_clip"].get<float>();
  const int64_t n = static_cast<int64_t>(model_->num_params());
  for (int step = 1; step <= 5; ++step) {
    model_->ZeroGrad();
    const float loss = model_->ForwardBackward(inputs_.data(), targets_.data(), B_, T_, 1.0f);
    EXPECT_LE(std::fabs(loss - want_losses[step - 1]) / want_losses[step - 1], 1e-5) << "step " << step;
    const double norm = std::sqrt(kernels::sum_squares(model_->grads(), n));
    const float coef = kernels::clip_coefficient(norm, clip);
    EXPECT_LT(coef, 1.0f) << "the fixture's clip must be active";
    kernels::scale_inplace(model_->grads(), n, coef);
    opt.Step(model_->params(), model_->grads(), hp_["lr"].get<double>(), step);
    std::vector<float> want(model_->num_params());
    for (const auto& t : model_->tensors()) {
      ASSERT_TRUE(fx_->ReadF32Into("step" + std::to_string(step) + "." + t.name, t.shape, want.data() + t.offset).ok());
    }
    const double perr = RelErr(model_->params(), want.data(), want.size());
    if (std::getenv("GANTRY_VERBOSE")) std::printf("step %d loss %.9g (torch %.9g) params rel err %.3g\n", step, loss, want_losses[step - 1], perr);
    if (std::getenv("GANTRY_VERBOSE") && step == 1) {
      for (const auto& t : model_->tensors()) {
        double m = 0;
        for (size_t i = t.offset; i < t.offset + t.numel; ++i) m = std::max(m, double(std::fabs(model_->params()[i] - want[i])));
        if (m > 1e-7) std::printf("  %-26s max abs diff %.3g\n", t.name.c_str(), m);
      }
    }
    EXPECT_LE(perr, 1e-5) << "parameters after step " << step;
  }
}

}  // namespace
}  // namespace gantry::model
