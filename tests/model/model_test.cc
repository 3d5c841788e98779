#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/safetensors.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "jobspec/job_spec.h"
#include "model/gpt.h"
#include "model/hf_io.h"

namespace gantry::model {
namespace {

jobspec::GPTConfig Small() { return {16, 50, 2, 2, 8}; }

TEST(GptTest, LayoutUsesHuggingFaceNamesAndShapes) {
  auto t = jobspec::ParameterLayout(Small());
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
  jobspec::GPTConfig c{64, 256, 4, 4, 64};
  GPT a(c), b(c), d(c);
  a.InitRandom(7);
  b.InitRandom(7);
  d.InitRandom(8);
  EXPECT_EQ(0, std::memcmp(a.params(), b.params(), a.num_params() * 4));
  EXPECT_NE(0, std::memcmp(a.params(), d.params(), a.num_params() * 4));
  auto stddev = [&](const std::string& name) {
    const jobspec::ParamTensor* t = a.FindTensor(name);
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

jobspec::GPTConfig SmallLlama() {
  jobspec::GPTConfig c{16, 50, 2, 6, 24};
  c.arch = jobspec::Arch::kLlama;
  c.n_kv_head = 2;
  c.ffn_hidden = 40;
  c.rope_theta = 500.0;
  c.norm_eps = 1e-6;
  return c;
}

TEST(GptTest, LlamaLayoutIsLlamaForCausalLMsStateDict) {
  const auto t = jobspec::ParameterLayout(SmallLlama());
  ASSERT_EQ(t.size(), 1u + 2 * 9 + 2);
  EXPECT_EQ(t[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(t[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(t[2].shape, (std::vector<int64_t>{24, 24}));  // nn.Linear: (out, in)
  EXPECT_EQ(t[3].shape, (std::vector<int64_t>{8, 24}));   // k_proj: 2 heads of 4
  EXPECT_TRUE(t[3].gemm_joined);                           // read with q_proj as one matrix
  EXPECT_EQ(t[3].offset, t[2].offset + t[2].numel);
  EXPECT_EQ(t[8].name, "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(t[9].shape, (std::vector<int64_t>{24, 40}));  // down_proj
  EXPECT_EQ(t.back().name, "lm_head.weight");
  EXPECT_FALSE(t[1].decay);  // RMSNorm's weight
  // Tensor parallelism: rank 1 of 2 holds query heads 3-5 and key/value head 1, and the
  // matching columns of o_proj.
  const auto r1 = jobspec::ParameterLayout(SmallLlama(), jobspec::ModelShard{2, 1});
  EXPECT_EQ(r1[2].row_begin, 12);
  EXPECT_EQ(r1[3].row_begin, 4);
  EXPECT_EQ(r1[3].shape, (std::vector<int64_t>{4, 24}));
  EXPECT_EQ(r1[5].col_runs, (std::vector<std::pair<int64_t, int64_t>>{{12, 24}}));
}

TEST(HfIoTest, LlamaSaveThenLoadGivesIdenticalWeightsAndLogits) {
  testing::TempDir d;
  GPT m(SmallLlama());
  m.InitRandom(3);
  EXPECT_EQ(m.params()[m.FindTensor("model.layers.1.input_layernorm.weight")->offset], 1.0f);
  ASSERT_TRUE(SaveHFModel(d.path(), m).ok());
  auto cfg = nlohmann::json::parse(*ReadFileToString(d.File("config.json")));
  EXPECT_EQ(cfg["model_type"], "llama");
  EXPECT_EQ(cfg["num_key_value_heads"], 2);
  auto f = SafetensorsFile::Open(d.File("model.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->Has("lm_head.weight"));
  EXPECT_TRUE(f->Has("model.layers.1.mlp.gate_proj.weight"));
  auto loaded = LoadHFModel(d.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config(), m.config());
  EXPECT_EQ(0, std::memcmp((*loaded)->params(), m.params(), m.num_params() * 4));
  std::vector<int32_t> in = {1, 2, 3, 4, 5, 6}, tg = {2, 3, 4, 5, 6, 7};
  EXPECT_EQ(m.Forward(in.data(), tg.data(), 2, 3), (*loaded)->Forward(in.data(), tg.data(), 2, 3));
}

// Every residual add of the forward runs fused with the norm after it (kernels::Backend's
// ResidualLayerNormForward, ResidualRMSNormForward): the layer's second norm, the next layer's
// input norm and the final norm. The profile names no lone residual add, and the one norm run
// alone is the first layer's input norm.
TEST(GptTest, ForwardFusesEachResidualAddWithTheNormAfterIt) {
  for (const jobspec::GPTConfig& c : {Small(), SmallLlama()}) {
    SCOPED_TRACE(c.llama() ? "llama" : "gpt2");
    GPT m(c);
    m.InitRandom(3);
    m.set_profiling(true);
    std::vector<int32_t> in = {1, 2, 3, 4, 5, 6}, tg = {2, 3, 4, 5, 6, 7};
    const float loss = m.Forward(in.data(), tg.data(), 2, 3);
    EXPECT_TRUE(std::isfinite(loss));
    std::set<std::string> ops;
    for (const auto& [name, seconds] : m.op_seconds()) ops.insert(name);
    const std::string norm = c.llama() ? "rmsnorm" : "layernorm";
    EXPECT_EQ(ops.count("residual+" + norm + " fwd"), 1u);
    EXPECT_EQ(ops.count("residual fwd"), 0u);
    EXPECT_EQ(ops.count(norm + " fwd"), 1u);
  }
}

// A directory of safetensors shards (model.safetensors.index.json), as save_pretrained writes
// large models: each tensor read from the file its weight_map names; one it does not name is
// an error naming it.
TEST(HfIoTest, ShardedSafetensorsLoadThroughTheIndex) {
  testing::TempDir d;
  GPT m(SmallLlama());
  m.InitRandom(5);
  ASSERT_TRUE(SaveHFModel(d.path(), m).ok());
  // Two shards: the embedding in one, everything else in the other.
  std::vector<TensorToWrite> a, b;
  nlohmann::json map;
  for (const jobspec::ParamTensor& t : m.tensors()) {
    const bool first = t.name == "model.embed_tokens.weight";
    (first ? a : b).push_back({t.name, "F32", t.shape, m.params() + t.offset});
    map[t.name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  ASSERT_TRUE(WriteSafetensors(d.File("model-00001-of-00002.safetensors"), a, {}).ok());
  ASSERT_TRUE(WriteSafetensors(d.File("model-00002-of-00002.safetensors"), b, {}).ok());
  std::filesystem::remove(d.File("model.safetensors"));
  ASSERT_TRUE(WriteFileAtomic(d.File("model.safetensors.index.json"), nlohmann::json{{"weight_map", map}}.dump()).ok());
  auto loaded = LoadHFModel(d.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(0, std::memcmp((*loaded)->params(), m.params(), m.num_params() * 4));
  map.erase("lm_head.weight");
  ASSERT_TRUE(WriteFileAtomic(d.File("model.safetensors.index.json"), nlohmann::json{{"weight_map", map}}.dump()).ok());
  loaded = LoadHFModel(d.path());
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("lm_head.weight"), absl::string_view::npos) << loaded.status();
}

// A GPT-2 with experts: its config.json names the MoE model type (which transformers refuses
// rather than loading it without its experts) and carries the moe keys; it reads back equal,
// and the weights load back under their Mixtral-style names.
TEST(HfIoTest, MoeConfigAndWeightsRoundTrip) {
  jobspec::GPTConfig c = Small();
  c.moe = {4, 2, 0.0, 0.01, 0.001, 2};
  ASSERT_TRUE(c.Validate().ok());
  testing::TempDir d;
  GPT m(c);
  m.InitRandom(4);
  ASSERT_TRUE(SaveHFModel(d.path(), m).ok());
  auto cfg = nlohmann::json::parse(*ReadFileToString(d.File("config.json")));
  EXPECT_EQ(cfg["model_type"], hf::kMoeModelType);
  EXPECT_EQ(cfg["moe"]["top_k"], 2);
  auto loaded = LoadHFModel(d.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->config(), c);
  EXPECT_EQ(0, std::memcmp((*loaded)->params(), m.params(), m.num_params() * 4));
  EXPECT_NE((*loaded)->FindTensor("h.1.mlp.experts.3.c_fc.weight"), nullptr);
  cfg["moe"].erase("top_k");
  ASSERT_TRUE(WriteFileAtomic(d.File("config.json"), cfg.dump()).ok());
  auto bad = hf::ReadConfig(d.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("moe.top_k"), absl::string_view::npos) << bad.status();
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
  EXPECT_FALSE(hf::ParseExportDtype("fp8").ok());
  EXPECT_NE(std::string(hf::ParseExportDtype("fp8").status().message()).find("--dtype is 'fp8': fp32 or bf16"),
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
  auto c = hf::ReadConfig(d.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("activation_function"), absl::string_view::npos);
  cfg.erase("activation_function");
  cfg.erase("n_head");
  ASSERT_TRUE(WriteFileAtomic(d.File("config.json"), cfg.dump()).ok());
  c = hf::ReadConfig(d.path());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("missing field 'n_head'"), absl::string_view::npos);
}

// config.json of a LlamaForCausalLM as transformers 5.24's LlamaConfig(...).to_json_string()
// writes it (RoPE's base inside rope_parameters).
constexpr char kLlamaTransformers5[] = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1,
  "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02,
  "intermediate_size": 176, "max_position_embeddings": 128, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2, "pad_token_id": null,
  "pretraining_tp": 1, "rms_norm_eps": 1e-06, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
  "tie_word_embeddings": false, "transformers_version": "5.24.0", "use_cache": true, "vocab_size": 256
})";

jobspec::GPTConfig LlamaOf(int max_seq_len, int vocab, int layers, int heads, int embd, int kv, int ffn, double theta, double eps) {
  jobspec::GPTConfig c{max_seq_len, vocab, layers, heads, embd};
  c.arch = jobspec::Arch::kLlama;
  c.n_kv_head = kv, c.ffn_hidden = ffn, c.rope_theta = theta, c.norm_eps = eps;
  return c;
}

TEST(HfIoTest, LlamaConfigParsesToItsModel) {
  auto c = hf::ParseConfig(kLlamaTransformers5, "M/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->arch, jobspec::Arch::kLlama);
  EXPECT_EQ(c->n_embd, 64);
  EXPECT_EQ(c->n_layer, 2);
  EXPECT_EQ(c->n_head, 4);
  EXPECT_EQ(c->kv_heads(), 2);
  EXPECT_EQ(c->ffn(), 176);
  EXPECT_EQ(c->max_seq_len, 128);
  EXPECT_EQ(c->vocab_size, 256);
  EXPECT_EQ(c->rope_theta, 500000.0);
  EXPECT_EQ(c->norm_eps, 1e-6);
  EXPECT_TRUE(*c == LlamaOf(128, 256, 2, 4, 64, 2, 176, 500000, 1e-6));
  // transformers 4's form: RoPE's base at the top, rope_scaling null; LlamaConfig's defaults
  // for what is absent (num_key_value_heads: the heads; rms_norm_eps 1e-6).
  auto j = nlohmann::json::parse(kLlamaTransformers5);
  j.erase("rope_parameters");
  j.erase("num_key_value_heads");
  j.erase("rms_norm_eps");
  j.erase("head_dim");
  j["rope_theta"] = 250000;  // an integer in the JSON
  j["rope_scaling"] = nullptr;
  c = hf::ParseConfig(j.dump(), "M/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(*c == LlamaOf(128, 256, 2, 4, 64, 4, 176, 250000, 1e-6)) << c->kv_heads() << " " << c->rope_theta;
  // Both places, agreeing.
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
  c = hf::ParseConfig(j.dump(), "M/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 250000.0);
  // Neither: RoPE's default base.
  j.erase("rope_parameters");
  j.erase("rope_theta");
  c = hf::ParseConfig(j.dump(), "M/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_theta, 10000.0);
  // No model_type: GPT-2, as before (whose fields this config lacks).
  j.erase("model_type");
  c = hf::ParseConfig(j.dump(), "M/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("missing field 'n_positions'"), absl::string_view::npos) << c.status();
}

TEST(HfIoTest, LlamaConfigFieldsGantryCannotHonourAreNamed) {
  const auto base = nlohmann::json::parse(kLlamaTransformers5);
  auto error = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = base;
    change(j);
    auto c = hf::ParseConfig(j.dump(), "M/config.json");
    EXPECT_FALSE(c.ok()) << j.dump();
    return c.ok() ? std::string() : std::string(c.status().message());
  };
  using J = nlohmann::json;
  const std::vector<std::pair<std::function<void(J&)>, std::string>> cases = {
      {[](J& j) { j["hidden_act"] = "gelu"; }, "M/config.json: field 'hidden_act' is \"gelu\", only \"silu\""},
      {[](J& j) { j["attention_bias"] = true; }, "field 'attention_bias' is true"},
      {[](J& j) { j["mlp_bias"] = true; }, "field 'mlp_bias' is true"},
      {[](J& j) { j["tie_word_embeddings"] = true; }, "field 'tie_word_embeddings' is true"},
      {[](J& j) { j["head_dim"] = 32; }, "field 'head_dim' is 32, only hidden_size / num_attention_heads = 16"},
      {[](J& j) { j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}}; },
       "field 'rope_parameters.rope_type' is \"llama3\""},
      {[](J& j) { j["rope_parameters"] = {{"type", "linear"}, {"factor", 2.0}}; }, "field 'rope_parameters.type' is \"linear\""},
      {[](J& j) { j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}}; }, "field 'rope_scaling' is {"},
      {[](J& j) { j["rope_theta"] = 10000.0; },
       "field 'rope_parameters.rope_theta' is 500000.0 but field 'rope_theta' is 10000.0"},
      {[](J& j) { j["rope_parameters"] = "default"; }, "field 'rope_parameters' is \"default\", not an object"},
      {[](J& j) { j["rms_norm_eps"] = "small"; }, "field 'rms_norm_eps' is \"small\", not a number"},
      {[](J& j) { j.erase("intermediate_size"); }, "missing field 'intermediate_size'"},
      {[](J& j) { j.erase("hidden_size"); }, "missing field 'hidden_size'"},
      {[](J& j) { j["num_hidden_layers"] = 2.5; }, "field 'num_hidden_layers' is not an integer"},
      {[](J& j) { j["num_key_value_heads"] = 3; }, "n_kv_head"},  // the config's own check
      {[](J& j) { j["num_key_value_heads"] = 0; }, "field 'num_key_value_heads' is 0, must be >= 1"},
      {[](J& j) { j["intermediate_size"] = 0; }, "field 'intermediate_size' is 0, must be >= 1"},
      {[](J& j) { j["model_type"] = "mistral"; }, "field 'model_type' is \"mistral\", expected \"gpt2\", \"llama\" or \"gantry_moe_gpt2\""},
  };
  for (const auto& [change, want] : cases) {
    const std::string e = error(change);
    EXPECT_NE(e.find(want), std::string::npos) << "want '" << want << "' in: " << e;
  }
  // Stated with Llama's own values: accepted.
  nlohmann::json j = base;
  j["hidden_act"] = "silu", j["attention_bias"] = false, j["mlp_bias"] = false, j["tie_word_embeddings"] = false;
  j["head_dim"] = 16, j["rope_scaling"] = nullptr, j["rope_theta"] = 500000;
  EXPECT_TRUE(hf::ParseConfig(j.dump(), "M/config.json").ok());
}

// What gantry writes for a Llama reads back to the same model: every field, bf16 or fp32,
// defaults resolved; and it is LlamaForCausalLM's config as transformers writes it.
TEST(HfIoTest, LlamaConfigJsonReadsBackEqual) {
  for (const jobspec::GPTConfig& c : {LlamaOf(128, 300, 2, 6, 48, 2, 136, 500000, 1e-6), LlamaOf(16, 256, 1, 2, 8, 0, 0, 10000, 1e-5),
                             LlamaOf(64, 50, 3, 4, 32, 1, 96, 1234.5, 3.25e-7), LlamaOf(8, 128256, 1, 8, 64, 8, 0, 5e5, 1e-5)}) {
    for (auto dtype : {kernels::Precision::kFp32, kernels::Precision::kBf16}) {
      const std::string text = hf::ConfigJson(c, dtype);
      auto back = hf::ParseConfig(text, "M/config.json");
      ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
      EXPECT_TRUE(*back == c) << text;
      EXPECT_EQ(back->rope_theta, c.rope_theta);
      EXPECT_EQ(back->norm_eps, c.norm_eps);
      auto j = nlohmann::json::parse(text);
      EXPECT_EQ(j["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
      EXPECT_EQ(j["model_type"], "llama");
      EXPECT_EQ(j["hidden_act"], "silu");
      EXPECT_EQ(j["tie_word_embeddings"], false);
      EXPECT_EQ(j["attention_bias"], false);
      EXPECT_EQ(j["mlp_bias"], false);
      EXPECT_EQ(j["head_dim"], c.n_embd / c.n_head);
      EXPECT_EQ(j["num_key_value_heads"], c.kv_heads());
      EXPECT_EQ(j["intermediate_size"], c.ffn());
      EXPECT_EQ(j["rope_parameters"]["rope_type"], "default");
      EXPECT_EQ(j["rope_parameters"]["rope_theta"], c.rope_theta);
      EXPECT_EQ(j["torch_dtype"], dtype == kernels::Precision::kBf16 ? "bfloat16" : "float32");
      EXPECT_EQ(j["gantry_tokenizer"], c.vocab_size == 256 ? "bytes" : "external");
    }
  }
  // Through a directory, as a checkpoint writes it.
  testing::TempDir d;
  const jobspec::GPTConfig c = LlamaOf(128, 300, 2, 6, 48, 2, 136, 500000, 1e-6);
  ASSERT_TRUE(hf::WriteConfig(d.path(), c).ok());
  auto back = hf::ReadConfig(d.path());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == c);
  // Another model is another config.
  jobspec::GPTConfig other = c;
  other.rope_theta = 10000;
  EXPECT_FALSE(*hf::ParseConfig(hf::ConfigJson(other), "M") == c);
  // GPT-2's is still GPT-2's, with or without model_type.
  const jobspec::GPTConfig g = Small();
  auto gj = nlohmann::json::parse(hf::ConfigJson(g));
  EXPECT_EQ(gj["model_type"], "gpt2");
  gj.erase("model_type");
  auto gb = hf::ParseConfig(gj.dump(), "M");
  ASSERT_TRUE(gb.ok()) << gb.status();
  EXPECT_EQ(gb->arch, jobspec::Arch::kGpt2);
  EXPECT_TRUE(*gb == g);
}

// Found by tests/fuzz/hf_config_fuzz and tests/fuzz/job_spec_fuzz: n_embd past 2^29
// overflowed 4 * n_embd (GPT-2's MLP width, an int), and the other sizes sized layouts built
// layer by layer. GPTConfig::Validate (the check of config.json's model and of a job spec's)
// bounds each past the largest models trained: a config.json past a bound is refused naming
// the field, one at it is read (hf::ParseConfig alone: no model is allocated).
TEST(HfIoTest, ModelSizesPastTheirBoundsAreRefusedNamingTheField) {
  using J = nlohmann::json;
  const J gpt2 = J::parse(hf::ConfigJson(Small()));
  const J llama = J::parse(kLlamaTransformers5);
  jobspec::GPTConfig with_experts = Small();
  with_experts.moe = {4, 1, 1.25, 0.01, 0.0, 1};
  const J moe = J::parse(hf::ConfigJson(with_experts));
  ASSERT_EQ(moe["model_type"], hf::kMoeModelType);
  struct Case {
    const J* base;
    std::function<void(J&)> change;
    std::string want;  // the error; empty: accepted
    std::function<bool(const jobspec::GPTConfig&)> holds;
  };
  const std::vector<Case> cases = {
      {&gpt2, [](J& j) { j["n_layer"] = 4097; }, "M/config.json: model.n_layer: 4097 is more than 4096", nullptr},
      {&gpt2, [](J& j) { j["n_embd"] = 65538; }, "M/config.json: model.n_embd: 65538 is more than 65536", nullptr},
      {&gpt2, [](J& j) { j["n_embd"] = 1 << 30, j["n_head"] = 1; },  // 4 * n_embd = 2^32
       "M/config.json: model.n_embd: 1073741824 is more than 65536", nullptr},
      {&llama, [](J& j) { j["intermediate_size"] = 262145; },
       "M/config.json: model.ffn_hidden: 262145 is more than 262144", nullptr},
      {&gpt2, [](J& j) { j["n_positions"] = 16777217; },
       "M/config.json: model.max_seq_len: 16777217 is more than 16777216", nullptr},
      {&moe, [](J& j) { j["moe"]["num_experts"] = 4097; },
       "M/config.json: model.moe.num_experts: 4097 is more than 4096", nullptr},
      // At each bound: read.
      {&gpt2, [](J& j) { j["n_layer"] = 4096; }, "", [](const jobspec::GPTConfig& c) { return c.n_layer == 4096; }},
      {&gpt2, [](J& j) { j["n_embd"] = 65536; }, "",
       [](const jobspec::GPTConfig& c) { return c.n_embd == 65536 && c.ffn() == 262144; }},
      {&llama, [](J& j) { j["intermediate_size"] = 262144; }, "", [](const jobspec::GPTConfig& c) { return c.ffn() == 262144; }},
      {&gpt2, [](J& j) { j["n_positions"] = 16777216; }, "",
       [](const jobspec::GPTConfig& c) { return c.max_seq_len == 16777216; }},
      {&moe, [](J& j) { j["moe"]["num_experts"] = 4096; }, "",
       [](const jobspec::GPTConfig& c) { return c.moe.num_experts == 4096; }},
  };
  for (const Case& k : cases) {
    J j = *k.base;
    k.change(j);
    SCOPED_TRACE(j.dump());
    auto c = hf::ParseConfig(j.dump(), "M/config.json");
    if (k.want.empty()) {
      EXPECT_TRUE(c.ok() && k.holds(*c)) << c.status();
    } else {
      EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
      EXPECT_EQ(std::string(c.status().message()), k.want);
    }
  }
}

// Found by tests/fuzz/hf_config_fuzz: a Llama's head_dim times the heads overflowed int64
// (head_dim 2^62 x 4 heads, undefined); wrapped, head_dim 2^62 + 16 x 4 heads came to
// hidden_size 64 and the config was read. The product is checked for overflow.
TEST(HfIoTest, AHeadDimWhoseProductWithTheHeadsOverflowsIsRefused) {
  for (uint64_t head_dim : {uint64_t{1} << 62, (uint64_t{1} << 62) + 16}) {
    auto j = nlohmann::json::parse(kLlamaTransformers5);  // hidden_size 64, 4 heads
    j["head_dim"] = head_dim;
    auto c = hf::ParseConfig(j.dump(), "M/config.json");
    ASSERT_FALSE(c.ok()) << head_dim;
    EXPECT_EQ(std::string(c.status().message()),
              absl::StrCat("M/config.json: field 'head_dim' is ", head_dim,
                           ", only hidden_size / num_attention_heads = 16 is supported"));
  }
}

// Found by tests/fuzz/job_spec_fuzz: moe keys stated with num_experts 0 describe the dense model,
// and the checkpoint's config.json (which states none without experts) reads back as the same
// model, as LoadCheckpoint compares it with the job spec's.
TEST(HfIoTest, MoeKeysWithoutExpertsReadBackFromConfigJsonAsTheDenseModel) {
  auto s = jobspec::ParseJobSpec("model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 8,\n"
                                 "        moe: {num_experts: 0, top_k: 2, capacity_factor: 2.0, aux_loss_coeff: 0.5, "
                                 "z_loss_coeff: 0.25, every_n_layers: 2}}\n"
                                 "data: {train: t.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n");
  ASSERT_TRUE(s.ok()) << s.status();
  auto config = hf::ParseConfig(hf::ConfigJson(s->model), "ckpt/config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(*config == s->model);
  EXPECT_TRUE(s->model == *config);
  EXPECT_EQ(jobspec::ModelDifferences(*config, "checkpoint", s->model, "job spec"), "");
}

}  // namespace
}  // namespace gantry::model
