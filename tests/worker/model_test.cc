#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "common/file_util.h"
#include "common/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "worker/model/gpt.h"
#include "worker/model/hf_io.h"

namespace gantry::model {
namespace {

GPTConfig Small() { return {16, 50, 2, 2, 8}; }

TEST(GptTest, LayoutUsesHuggingFaceNamesAndShapes) {
  auto t = ParameterLayout(Small());
  ASSERT_EQ(t.size(), 2u + 2 * 12 + 2);
  EXPECT_EQ(t[0].name, "wte.weight");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{50, 8}));
  EXPECT_EQ(t[4].name, "h.0.attn.c_attn.weight");
  EXPECT_EQ(t[4].shape, (std::vector<int64_t>{8, 24}));  // Conv1D: (in, out)
  EXPECT_TRUE(t[4].decay);
  EXPECT_FALSE(t[5].decay);  // bias
  EXPECT_EQ(t.back().name, "ln_f.bias");
}

TEST(GptTest, InitIsDeterministicPerSeedWithGpt2Scales) {
  GPTConfig c{64, 256, 4, 4, 64};
  GPT a(c), b(c), d(c);
  a.InitRandom(7);
  b.InitRandom(7);
  d.InitRandom(8);
  EXPECT_EQ(0, std::memcmp(a.params(), b.params(), a.num_params() * 4));
  EXPECT_NE(0, std::memcmp(a.params(), d.params(), a.num_params() * 4));
  auto stddev = [&](const std::string& name) {
    const ParamTensor* t = a.FindTensor(name);
    double s = 0;
    for (size_t i = 0; i < t->numel; ++i) s += double(a.params()[t->offset + i]) * a.params()[t->offset + i];
    return std::sqrt(s / t->numel);
  };
  EXPECT_NEAR(stddev("h.0.mlp.c_fc.weight"), 0.02, 0.001);
  EXPECT_NEAR(stddev("h.0.mlp.c_proj.weight"), 0.02 / std::sqrt(8.0), 0.0005);
  EXPECT_EQ(a.params()[a.FindTensor("h.1.ln_2.weight")->offset], 1.0f);
  EXPECT_EQ(a.params()[a.FindTensor("h.1.ln_2.bias")->offset], 0.0f);
}

TEST(HfIoTest, SaveThenLoadGivesIdenticalWeightsAndLogits) {
  testing::TempDir d;
  GPT m(Small());
  m.InitRandom(3);
  ASSERT_TRUE(SaveHFModel(d.path(), m).ok());
  auto cfg = nlohmann::json::parse(*ReadFileToString(d.File("config.json")));
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["n_positions"], 16);
  auto loaded = LoadHFModel(d.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config(), m.config());
  EXPECT_EQ(0, std::memcmp((*loaded)->params(), m.params(), m.num_params() * 4));
  std::vector<int32_t> in = {1, 2, 3, 4, 5, 6}, tg = {2, 3, 4, 5, 6, 7};
  EXPECT_EQ(m.Forward(in.data(), tg.data(), 2, 3), (*loaded)->Forward(in.data(), tg.data(), 2, 3));
}

// export --dtype bf16: every tensor stored as BF16, each value the fp32 master rounded to
// nearest (ties to even), config.json saying bfloat16; it loads back as those values.
TEST(HfIoTest, Bf16ExportHoldsTheRoundedMasterWeights) {
  testing::TempDir d;
  GPT m(Small());
  m.InitRandom(3);
  ASSERT_TRUE(SaveHFModel(d.path(), m, kernels::Precision::kBf16).ok());
  auto cfg = nlohmann::json::parse(*ReadFileToString(d.File("config.json")));
  EXPECT_EQ(cfg["torch_dtype"], "bfloat16");
  auto f = SafetensorsFile::Open(d.File("model.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  for (const auto& t : m.tensors()) {
    ASSERT_TRUE(f->Has(t.name)) << t.name;
    EXPECT_EQ(f->tensors().at(t.name).dtype, "BF16") << t.name;
  }
  EXPECT_LT(std::filesystem::file_size(d.File("model.safetensors")), m.num_params() * 2 + 8192) << "2 bytes a weight";
  auto loaded = LoadHFModel(d.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  size_t changed = 0;
  for (size_t i = 0; i < m.num_params(); ++i) {
    ASSERT_EQ((*loaded)->params()[i], kernels::RoundToBf16(m.params()[i])) << i;
    changed += (*loaded)->params()[i] != m.params()[i];
  }
  EXPECT_GT(changed, m.num_params() / 2) << "N(0, 0.02) weights are rarely bf16 values";
  EXPECT_FALSE(ParseExportDtype("fp8").ok());
  EXPECT_NE(std::string(ParseExportDtype("fp8").status().message()).find("--dtype is 'fp8': fp32 or bf16"),
            std::string::npos);
}

TEST(HfIoTest, LoadsNamesWithTransformerPrefix) {
  testing::TempDir d;
  GPT m(Small());
  m.InitRandom(3);
  ASSERT_TRUE(SaveHFModel(d.path(), m).ok());
  std::vector<TensorToWrite> out;
  for (const auto& t : m.tensors()) out.push_back({"transformer." + t.name, "F32", t.shape, m.params() + t.offset});
  out.push_back({"lm_head.weight", "F32", m.tensors()[0].shape, m.params()});
  ASSERT_TRUE(WriteSafetensors(d.File("model.safetensors"), out).ok());
  auto loaded = LoadHFModel(d.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(0, std::memcmp((*loaded)->params(), m.params(), m.num_params() * 4));
}

TEST(HfIoTest, WrongShapeAndMissingTensorAreNamed) {
  testing::TempDir d;
  GPT m(Small());
  ASSERT_TRUE(SaveHFModel(d.path(), m).ok());
  std::vector<TensorToWrite> out;
  for (const auto& t : m.tensors()) {
    if (t.name == "h.1.mlp.c_fc.bias") continue;  // missing
    auto shape = t.shape;
    if (t.name == "h.0.attn.c_proj.weight") shape = {4, 16};  // same count, wrong shape
    out.push_back({t.name, "F32", shape, m.params() + t.offset});
  }
  ASSERT_TRUE(WriteSafetensors(d.File("model.safetensors"), out).ok());
  auto loaded = LoadHFModel(d.path());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("'h.0.attn.c_proj.weight' has shape [4, 16], expected [8, 8]"),
            absl::string_view::npos) << loaded.status();
  out.erase(std::remove_if(out.begin(), out.end(), [](auto& t) { return t.name == "h.0.attn.c_proj.weight"; }), out.end());
  out.push_back({"h.0.attn.c_proj.weight", "F32", {8, 8}, m.params()});
  ASSERT_TRUE(WriteSafetensors(d.File("model.safetensors"), out).ok());
  loaded = LoadHFModel(d.path());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("missing tensor 'h.1.mlp.c_fc.bias'"), absl::string_view::npos)
      << loaded.status();
}

TEST(HfIoTest, UnsupportedConfigFieldsAreNamed) {
  testing::TempDir d;
  GPT m(Small());
  ASSERT_TRUE(SaveHFModel(d.path(), m).ok());
  auto cfg = nlohmann::json::parse(*ReadFileToString(d.File("config.json")));
  cfg["activation_function"] = "relu";
  ASSERT_TRUE(WriteFileAtomic(d.File("config.json"), cfg.dump()).ok());
  auto c = ReadHFConfig(d.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("activation_function"), absl::string_view::npos);
  cfg.erase("activation_function");
  cfg.erase("n_head");
  ASSERT_TRUE(WriteFileAtomic(d.File("config.json"), cfg.dump()).ok());
  c = ReadHFConfig(d.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("missing field 'n_head'"), absl::string_view::npos);
}

}  // namespace
}  // namespace gantry::model
