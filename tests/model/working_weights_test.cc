// Mixed precision's working weights (model/working_weights.h) on the cpu backend: the
// persistent image and the per-unit casts give the same bf16 bits (each the parameter rounded
// to nearest), the image is recast only when invalidated, and fp32 reads the parameters.
#include "model/working_weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/types.h"

namespace gantry::model {
namespace {

class WorkingWeightsTest : public ::testing::Test {
 protected:
  WorkingWeightsTest() : config_{16, 50, 2, 2, 24}, tensors_(jobspec::ParameterLayout(config_)) {
    size_t n = 0;
    for (const auto& t : tensors_) n = std::max(n, t.offset + t.numel);
    params_.resize(n);
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.f, 0.3f);
    for (float& x : params_) x = d(rng);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].name == jobspec::ClassifierTensor(config_)) classifier_ = i;
    }
  }
  // Layer l's first tensor and its GEMM tensors' fp32 pointers (GPT-2: 2-5 and 8-11).
  size_t First(int l) const {
    const std::string prefix = "h." + std::to_string(l) + ".";
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].name.rfind(prefix, 0) == 0) return i;
    }
    return 0;
  }
  std::vector<const float*> Src(int l) const {
    const size_t f = First(l);
    std::vector<const float*> s;
    for (int k : {2, 3, 4, 5, 8, 9, 10, 11}) s.push_back(params_.data() + tensors_[f + k].offset);
    return s;
  }
  // Each of the operands' elements is the bf16 of its fp32 tensor.
  void ExpectRounded(const GemmOperands& g, int l) {
    const kernels::CPtr ops[8] = {g.qkvw, g.qkvb, g.projw, g.projb, g.fcw, g.fcb, g.fcprojw, g.fcprojb};
    const size_t f = First(l);
    ASSERT_EQ(tensors_[f + 2].name, "h." + std::to_string(l) + ".attn.c_attn.weight");
    ASSERT_EQ(tensors_[f + 11].name, "h." + std::to_string(l) + ".mlp.c_proj.bias");
    const int idx[8] = {2, 3, 4, 5, 8, 9, 10, 11};
    for (int i = 0; i < 8; ++i) {
      ASSERT_EQ(ops[i].type, kernels::Precision::kBf16);
      const jobspec::ParamTensor& t = tensors_[f + idx[i]];
      const auto* bits = static_cast<const uint16_t*>(ops[i].data);
      for (size_t j = 0; j < t.numel; ++j) {
        ASSERT_EQ(bits[j], kernels::Bf16Of(params_[t.offset + j])) << t.name << "[" << j << "]";
      }
    }
  }

  jobspec::GPTConfig config_;
  std::vector<jobspec::ParamTensor> tensors_;
  std::vector<float> params_;
  size_t classifier_ = 0;
};

TEST_F(WorkingWeightsTest, Fp32ReadsTheParametersThemselves) {
  WorkingWeights w(&kernels::CpuBackend(), &tensors_, /*llama=*/false, classifier_);
  w.Refresh(params_.data());
  const auto src = Src(1);
  const GemmOperands g = w.Layer(src.data(), First(1), /*per_unit=*/false);
  EXPECT_EQ(g.qkvw.data, src[0]);
  EXPECT_EQ(g.fcprojb.data, src[7]);
  EXPECT_EQ(w.Classifier(params_.data(), false).data, params_.data());
  EXPECT_EQ(w.bytes(), 0u);
}

TEST_F(WorkingWeightsTest, TheImageAndThePerUnitCastsHoldTheSameRoundedBits) {
  WorkingWeights w(&kernels::CpuBackend(), &tensors_, /*llama=*/false, classifier_);
  w.set_precision(kernels::Precision::kBf16);
  w.Refresh(params_.data());
  for (int l = 0; l < config_.n_layer; ++l) ExpectRounded(w.Layer(Src(l).data(), First(l), false), l);
  const size_t image = w.bytes();
  EXPECT_GT(image, 0u);
  for (int l = 0; l < config_.n_layer; ++l) ExpectRounded(w.Layer(Src(l).data(), First(l), true), l);
  EXPECT_GT(w.bytes(), image);  // + one unit's buffer
  const jobspec::ParamTensor& cls = tensors_[classifier_];
  const float* W = params_.data() + cls.offset;
  for (bool per_unit : {false, true}) {
    const auto* bits = static_cast<const uint16_t*>(w.Classifier(W, per_unit).data);
    for (size_t j = 0; j < cls.numel; ++j) ASSERT_EQ(bits[j], kernels::Bf16Of(W[j])) << per_unit << " " << j;
  }
  w.ReleasePerUnit();
  EXPECT_EQ(w.bytes(), image);
  w.ReleaseImage();
  EXPECT_EQ(w.bytes(), 0u);
}

TEST_F(WorkingWeightsTest, TheImageIsRecastOnlyWhenInvalidated) {
  WorkingWeights w(&kernels::CpuBackend(), &tensors_, /*llama=*/false, classifier_);
  w.set_precision(kernels::Precision::kBf16);
  w.Refresh(params_.data());
  const size_t qkv = tensors_[First(0) + 2].offset;
  const float before = params_[qkv];
  params_[qkv] = before + 1.0f;  // an update the image has not seen
  w.Refresh(params_.data());
  auto bits = [&] { return static_cast<const uint16_t*>(w.Layer(Src(0).data(), First(0), false).qkvw.data)[0]; };
  EXPECT_EQ(bits(), kernels::Bf16Of(before));
  w.Invalidate();
  w.Refresh(params_.data());
  EXPECT_EQ(bits(), kernels::Bf16Of(before + 1.0f));
}

}  // namespace
}  // namespace gantry::model
