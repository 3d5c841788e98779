// Writes the fuzz targets' seed corpora: tests/fuzz/corpus/<target>/, real inputs made by
// Gantry's own writers (safetensors, checkpoints, Hugging Face directories, token files,
// serialized requests) plus hand-written edge cases. Deterministic: run.sh --corpus runs
// it, and its output is committed.
//   fuzz_make_corpus SOURCE_DIR OUT_DIR   (OUT_DIR/<target>/<seed> files; existing seeds replaced)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "common/param_wire.h"
#include "common/safetensors.h"
#include "gantry/v1/coordinator.pb.h"
#include "gantry/v1/shardserver.pb.h"
#include "tests/fuzz/fuzz_util.h"
#include "data/token_file.h"
#include "hf/hf_format.h"
#include "model/hf_io.h"
#include "checkpoint/checkpoint.h"

namespace {

using namespace gantry;
namespace fs = std::filesystem;

fs::path g_out;

void Put(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_out / target;
  fs::create_directories(dir);
  if (!WriteFileAtomic((dir / name).string(), bytes).ok()) {
    std::fprintf(stderr, "writing %s/%s failed\n", dir.c_str(), name.c_str());
    std::exit(1);
  }
}

std::string Read(const std::string& path) {
  auto s = ReadFileToString(path);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
    std::exit(1);
  }
  return *s;
}

// A directory's files, `first` first, the rest by name.
std::vector<std::pair<std::string, std::string>> DirFiles(const std::string& dir, const std::string& first) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  std::vector<std::pair<std::string, std::string>> files = {{first, Read(dir + "/" + first)}};
  for (const auto& n : names) {
    if (n != first) files.emplace_back(n, Read(dir + "/" + n));
  }
  return files;
}

std::string TempDir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / absl::StrCat("gantry-corpus-", getpid()) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

jobspec::GPTConfig Gpt2Tiny() {
  jobspec::GPTConfig c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.vocab_size = 16, c.max_seq_len = 8;
  return c;
}
jobspec::GPTConfig LlamaTiny() {
  jobspec::GPTConfig c = Gpt2Tiny();
  c.arch = jobspec::Arch::kLlama;
  c.n_kv_head = 1, c.ffn_hidden = 12, c.norm_eps = 1e-6;
  return c;
}
jobspec::GPTConfig MoeTiny() {
  jobspec::GPTConfig c = Gpt2Tiny();
  c.moe.num_experts = 2, c.moe.top_k = 1, c.moe.every_n_layers = 2;
  return c;
}

// ---- job specs ----
void JobSpecs(const std::string& source_dir) {
  const std::string t = "job_spec_fuzz";
  Put(t, "demo.yaml", Read(source_dir + "/configs/demo.yaml"));
  const std::string base =
      "name: tiny\nmodel: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 16}\n"
      "data: {train: data/train.bin, val: data/val.bin, shuffle: true}\n"
      "train: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n";
  Put(t, "minimal.yaml", base);
  Put(t, "llama.yaml",
      "model: {arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, n_embd: 32, vocab_size: 256, seq_len: 16,\n"
      "        ffn_hidden: 64, rope_theta: 500000, norm_eps: 1.0e-5}\n"
      "data: {train: \"data/t_*.bin\", tokenizer: gpt2/tokenizer.json}\ntrain: {steps: 5, micro_batch: 1, lr: 3.0e-4}\n");
  Put(t, "moe.yaml",
      "model: {n_layer: 2, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 16,\n"
      "        moe: {num_experts: 4, top_k: 2, capacity_factor: 1.25, aux_loss_coeff: 0.01, z_loss_coeff: 0.001, "
      "every_n_layers: 2}}\n"
      "data: {train: data/train.bin}\ntrain: {steps: 5, micro_batch: 2, lr: 1.0e-3}\n");
  Put(t, "parallel.yaml",
      base + "parallel: {dp: 2, tp: 2, pp: 2, zero_stage: 1, bucket_mb: 1, timeout_s: 30, schedule: gpipe, "
             "sequence_parallel: true}\nresources: {workers: 8, device: cuda-emulated}\n");
  Put(t, "zero3_offload.yaml",
      base + "parallel: {dp: 2, zero_stage: 3, offload_params: cpu}\noptimizer: {offload: cpu}\n"
             "train2: 1\n");
  Put(t, "zero3_offload_ok.yaml", base + "parallel: {dp: 2, zero_stage: 3, offload_params: cpu}\noptimizer: {offload: cpu}\n");
  Put(t, "shardserver.yaml", base + "optimizer: {placement: shardserver, staleness: 1}\n");
  Put(t, "fp16.yaml",
      "model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8, max_seq_len: 32}\n"
      "data: {train: a.bin}\n"
      "train:\n  steps: 100\n  micro_batch: 4\n  global_batch: 16\n  lr: 0.001\n  warmup: 10\n  min_lr_ratio: 0.1\n"
      "  beta1: 0.9\n  beta2: 0.95\n  eps: 1.0e-8\n  weight_decay: 0.1\n  grad_clip: 1.0\n  seed: 18446744073709551615\n"
      "  recompute: selective\n  precision: fp16\n  loss_scale: 1024\n  loss_scale_window: 100\n"
      "  grad_reduce_dtype: bf16\n"
      "eval: {every: 10, batches: 2}\ncheckpoint: {every: 50, keep: 2, host_budget_mb: 64, dir: runs/x, "
      "resume_from: j-000001@50}\n");
  Put(t, "elastic.yaml", base + "train2: {}\n");
  Put(t, "elastic_ok.yaml",
      "model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\ndata: {train: a.bin}\n"
      "train: {steps: 10, micro_batch: 1, global_batch: 12, lr: 0.01}\nparallel: {dp: 2}\n"
      "elastic: {min_dp: 1, max_dp: 4}\nscheduling: {priority: 5, max_restarts: 0}\n");
  // Edge cases: not a mapping, unknown and ill-typed fields, YAML's own constructs.
  Put(t, "empty.yaml", "");
  Put(t, "list.yaml", "- a\n- b\n");
  Put(t, "unknown.yaml", base + "train2: {lrr: 1}\n");
  Put(t, "typed.yaml", "model: {n_layer: two}\n");
  Put(t, "complex_key.yaml", "? {a: 1}\n: 2\nmodel: {? [n_layer]: 1}\n");
  Put(t, "anchors.yaml", "model: &m {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\n"
                         "data: {train: *m}\ntrain: *m\n");
  Put(t, "numbers.yaml", "model: {n_layer: 0x7fffffff, n_head: 1e3, n_embd: -0, vocab_size: .inf, seq_len: .nan}\n");
  Put(t, "huge.yaml",
      "model: {n_layer: 2147483647, n_head: 1, n_embd: 2147483647, vocab_size: 16777216, seq_len: 2147483647}\n"
      "data: {train: a}\ntrain: {steps: 9223372036854775807, micro_batch: 2147483647, lr: 1.0e308}\n"
      "parallel: {dp: 65536, tp: 1, pp: 1}\n");
  Put(t, "nested.yaml", std::string(200, '[') + std::string(200, ']') + "\n");
  Put(t, "tags.yaml", "!!map {model: !!str x, ? !!null : !!binary aGVsbG8=}\n");
}

// ---- safetensors ----
void Safetensors() {
  const std::string t = "safetensors_fuzz";
  const float f32[6] = {1, -2, 3.5f, 0, 1e-30f, -1e30f};
  const uint16_t b16[4] = {0x3f80, 0xc000, 0x7f80, 0x0001};
  const int32_t i32[3] = {1, -1, 7};
  const int64_t i64[2] = {-5, int64_t{1} << 40};
  const double f64[2] = {0.25, -1e300};
  const uint16_t f16[4] = {0x3c00, 0x8001, 0x7c00, 0x03ff};
  std::vector<TensorToWrite> all = {{"wte.weight", "F32", {2, 3}, f32},
                                    {"h.0.ln_1.bias", "BF16", {4}, b16},
                                    {"ids", "I32", {3}, i32},
                                    {"big", "I64", {2}, i64},
                                    {"d", "F64", {1, 2}, f64},
                                    {"half", "F16", {2, 2}, f16},
                                    {"scalar", "F32", {}, f32},
                                    {"empty", "F32", {0, 3}, f32}};
  Put(t, "all_dtypes.safetensors", SerializeSafetensors(all, {{"format", "pt"}}));
  Put(t, "one.safetensors", SerializeSafetensors({all[0]}));
  Put(t, "one_on_disk.safetensors", SerializeSafetensors({all[0]}) + "\x01");  // odd last byte: the file path
  Put(t, "empty_header.safetensors", std::string("\x02\0\0\0\0\0\0\0{}", 10));
  Put(t, "metadata_only.safetensors", SerializeSafetensors({}, {{"producer", "gantry"}}));
  std::string truncated = SerializeSafetensors({all[0]});
  truncated.resize(truncated.size() - 5);
  Put(t, "truncated.safetensors", truncated);
  std::string bad_len = SerializeSafetensors({all[0]});
  bad_len[7] = '\x7f';
  Put(t, "bad_length.safetensors", bad_len);
  const std::string hand = R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]},)"
                           R"("b":{"dtype":"U8","shape":[-1],"data_offsets":[1,0]},"__metadata__":{"x":1}})";
  std::string h(8, '\0');
  const uint64_t n = hand.size();
  std::memcpy(h.data(), &n, 8);
  Put(t, "hostile_header.safetensors", h + hand + "abcd");
}

// ---- Hugging Face model directories ----
void HfConfigs() {
  const std::string t = "hf_config_fuzz";
  Put(t, "gpt2_config.json", hf::ConfigJson(Gpt2Tiny()));
  Put(t, "llama_config.json", hf::ConfigJson(LlamaTiny(), kernels::Precision::kBf16));
  Put(t, "moe_config.json", hf::ConfigJson(MoeTiny()));
  // As transformers writes them (GPT-2's own, a Llama 3 with rope_parameters).
  Put(t, "hf_gpt2.json",
      R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,)"
      R"( "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,)"
      R"( "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,)"
      R"( "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": null,)"
      R"( "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}}, "vocab_size": 50257})");
  Put(t, "hf_llama3.json",
      R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false, "hidden_act": "silu", "hidden_size": 2048,)"
      R"( "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",)"
      R"( "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,)"
      R"( "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}, "rope_theta": 500000.0,)"
      R"( "tie_word_embeddings": false, "head_dim": 64, "vocab_size": 128256})");
  Put(t, "hostile.json",
      R"({"model_type": "llama", "hidden_size": 2147483647, "num_hidden_layers": 4294967296, "num_attention_heads": -1,)"
      R"( "intermediate_size": 1e400, "max_position_embeddings": 8, "vocab_size": 16, "head_dim": 4611686018427387904,)"
      R"( "rope_scaling": null, "rope_parameters": {"type": "default", "rope_theta": "x"}})");
  Put(t, "not_object.json", "[1, 2, 3]");
  // Whole directories: config.json and model.safetensors, or shards and their index.
  for (const auto& [name, c] : std::vector<std::pair<std::string, jobspec::GPTConfig>>{
           {"gpt2", Gpt2Tiny()}, {"llama", LlamaTiny()}, {"moe", MoeTiny()}}) {
    model::GPT m(c);
    m.InitRandom(1);
    const std::string dir = TempDir("hf-" + name);
    if (!model::SaveHFModel(dir, m).ok()) std::exit(1);
    Put(t, name + "_dir", fuzz::JoinFiles(DirFiles(dir, "config.json")));
  }
  {
    model::GPT m(Gpt2Tiny());
    m.InitRandom(2);
    const std::string dir = TempDir("hf-sharded");
    if (!model::SaveHFModel(dir, m).ok()) std::exit(1);
    auto f = SafetensorsFile::Open(dir + "/model.safetensors");
    std::vector<std::vector<float>> keep;
    std::vector<TensorToWrite> a, b;
    std::string index = R"({"metadata": {"total_size": 0}, "weight_map": {)";
    int i = 0;
    for (const auto& [tn, info] : f->tensors()) {
      keep.push_back(*f->ReadF32(tn));
      const bool first = i++ % 2 == 0;
      (first ? a : b).push_back({"transformer." + tn, "F32", info.shape, keep.back().data()});
      index += absl::StrCat(i > 1 ? ", " : "", "\"transformer.", tn, "\": \"model-0000", first ? 1 : 2, "-of-00002.safetensors\"");
    }
    index += "}}";
    Put(t, "gpt2_sharded_dir",
        fuzz::JoinFiles({{"config.json", Read(dir + "/config.json")},
                         {"model.safetensors.index.json", index},
                         {"model-00001-of-00002.safetensors", SerializeSafetensors(a)},
                         {"model-00002-of-00002.safetensors", SerializeSafetensors(b)}}));
  }
}

// ---- llm.c token files (the first byte picks T and the vocabulary: token_file_fuzz.cc) ----
void TokenFiles() {
  const std::string t = "token_file_fuzz";
  const std::string dir = TempDir("tokens");
  auto file = [&](const std::string& name, uint8_t mode, const std::string& path) {
    Put(t, name, std::string(1, static_cast<char>(mode)) + Read(path));
  };
  std::vector<uint16_t> narrow;
  for (int i = 0; i < 40; ++i) narrow.push_back(static_cast<uint16_t>((i * 37) % 256));
  if (!data::WriteTokenFile(dir + "/v1.bin", narrow).ok()) std::exit(1);
  file("v1_bytes_T4.bin", 0x03, dir + "/v1.bin");
  file("v1_gpt2_T16.bin", 0x1f, dir + "/v1.bin");
  std::vector<uint32_t> wide;
  for (int i = 0; i < 30; ++i) wide.push_back(static_cast<uint32_t>(70000 + i * 1000));
  if (!data::WriteTokenFile(dir + "/v2.bin", wide, 128256).ok()) std::exit(1);
  file("v2_llama3_T5.bin", 0x24, dir + "/v2.bin");
  file("v2_gpt2_T5.bin", 0x14, dir + "/v2.bin");  // ids past GPT-2's vocabulary: refused
  if (!data::WriteTokenFile(dir + "/empty.bin", std::vector<uint16_t>{}).ok()) std::exit(1);
  file("empty.bin", 0x30, dir + "/empty.bin");
  std::string bad = Read(dir + "/v1.bin");
  bad[8] = '\x7f';  // a count past the body
  Put(t, "count_past_body.bin", "\x01" + bad);
  bad = Read(dir + "/v1.bin");
  bad[4] = 3;  // version 3
  Put(t, "version3.bin", "\x01" + bad);
  Put(t, "short.bin", std::string("\x01\x88\xd8\x34\x01\x01\0\0\0", 9));
}

// ---- checkpoints (manifest first, then config.json and the parts) ----
void Checkpoints() {
  const std::string t = "checkpoint_fuzz";
  struct Case {
    std::string name;
    jobspec::GPTConfig config;
    int parts;
    std::vector<size_t> cuts;
  };
  for (const Case& k : std::vector<Case>{{"gpt2_dp1", Gpt2Tiny(), 1, {}},
                                          {"gpt2_dp2", Gpt2Tiny(), 2, {}},
                                          {"gpt2_dp2_cut", Gpt2Tiny(), 2, {100, 300}},
                                          {"llama_dp1", LlamaTiny(), 1, {}},
                                          {"moe_dp1", MoeTiny(), 1, {}}}) {
    model::GPT m(k.config);
    m.InitRandom(3);
    const size_t n = m.num_params();
    std::vector<float> mm(n, 0.5f), vv(n, 0.25f);
    const std::string dir = TempDir("ckpt-" + k.name);
    for (int r = 0; r < k.parts; ++r) {
      const size_t b = n * r / k.parts, e = n * (r + 1) / k.parts;
      const checkpoint::CheckpointPiece p{b, e, m.params() + b, mm.data() + b, vv.data() + b};
      if (!checkpoint::WriteCheckpointPart(dir, r, m.tensors(), {p}, k.cuts).ok()) std::exit(1);
    }
    checkpoint::CheckpointState st;
    st.step = 10, st.seed = 1337, st.data_rows = 40, st.tokenizer = "gpt2/tokenizer.json";
    if (k.name == "gpt2_dp1") st.loss_scale = optim::LossScaleState{1024, 3, 1};
    if (!checkpoint::WriteCheckpointManifest(dir, k.config, st, {k.parts, k.parts > 1 ? 1 : 0, 1, 1}, k.parts, k.cuts).ok()) {
      std::exit(1);
    }
    Put(t, k.name, fuzz::JoinFiles(DirFiles(dir, "manifest.json")));
  }
  Put(t, "manifest_only", R"({"format": "gantry-sharded-1", "step": 1, "seed": 2, "parts": ["part-00000.safetensors"],)"
                          R"( "layout": {"dp": "x"}, "data": {"rows": 1, "tokenizer": 5}})");
}

// ---- tokenizers: small byte-level BPEs made here (tokenizer.json, or vocab.json + merges.txt) ----
std::string ByteChar(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  int cp = b;
  if (!printable) {
    int k = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++k;
    }
    cp = 256 + k;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

void Tokenizers() {
  const std::string t = "tokenizer_fuzz";
  // 256 byte tokens, then merges of a few common pairs.
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(ByteChar(b));
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {ByteChar(' '), "w"}, {"o", "r"}, {ByteChar(' ') + "w", "or"},
      {"l", "d"}, {ByteChar(' ') + "wor", "ld"}, {"'", "s"}, {"i", "t"}};
  for (const auto& [a, b] : merges) vocab.push_back(a + b);
  vocab.push_back("<|endoftext|>");
  auto vocab_json = [&](const std::string& indent) {
    std::string v = "{";
    for (size_t i = 0; i < vocab.size(); ++i) v += absl::StrCat(i ? "," : "", indent, JsonString(vocab[i]), ": ", i);
    return v + "}";
  };
  std::string merges_json = "[";
  std::string merges_txt = "#version: 0.2\n";
  for (size_t i = 0; i < merges.size(); ++i) {
    merges_json += absl::StrCat(i ? ", " : "", "[", JsonString(merges[i].first), ", ", JsonString(merges[i].second), "]");
    merges_txt += merges[i].first + " " + merges[i].second + "\n";
  }
  merges_json += "]";
  const std::string eot = std::to_string(vocab.size() - 1);
  auto tokenizer = [&](const std::string& pre, const std::string& added, const std::string& merges_field) {
    return absl::StrCat(R"({"version": "1.0", "added_tokens": )", added, R"(, "normalizer": null, "pre_tokenizer": )", pre,
                        R"(, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "dropout": null, )",
                        R"("unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null, )",
                        R"("fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": )", vocab_json(""),
                        R"(, "merges": )", merges_field, "}}");
  };
  const std::string special = absl::StrCat(R"([{"id": )", eot,
                                           R"(, "content": "<|endoftext|>", "single_word": false, "lstrip": false, )"
                                           R"("rstrip": false, "normalized": false, "special": true}])");
  const std::string gpt2_pre = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  Put(t, "gpt2_style.json", tokenizer(gpt2_pre, special, merges_json));
  std::string string_merges = "[";
  for (size_t i = 0; i < merges.size(); ++i) {
    string_merges += absl::StrCat(i ? ", " : "", JsonString(merges[i].first + " " + merges[i].second));
  }
  Put(t, "string_merges.json", tokenizer(gpt2_pre, "[]", string_merges + "]"));
  Put(t, "prefix_space.json",
      tokenizer(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})", special, merges_json) +
          "\n%%file text\n<|endoftext|>hello world<|endoftext|> it's");
  const std::string llama3_pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";
  const std::string llama3_pre = absl::StrCat(
      R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": ")", llama3_pattern,
      R"("}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel", "add_prefix_space": false, )",
      R"("trim_offsets": true, "use_regex": false}]})");
  const std::string llama_added = absl::StrCat(
      R"([{"id": )", vocab.size(), R"(, "content": "<|begin_of_text|>", "special": true}, {"id": )", vocab.size() + 1,
      R"(, "content": "<|end_of_text|>", "special": true, "lstrip": true, "rstrip": true, "single_word": true}])");
  Put(t, "llama3_style.json",
      tokenizer(llama3_pre, llama_added, merges_json) +
          "\n%%file text\nI'M here 12345 \xC5\xBF\r\n\r\n  tabs\tand <|end_of_text|> \xff\xfe done");
  Put(t, "whole.json", tokenizer(R"({"type": "ByteLevel", "use_regex": false})", "[]", merges_json) +
                           "\n%%file text\nno split at all");
  Put(t, "vocab_merges", fuzz::JoinFiles({{"tokenizer.json", ""}, {"vocab.json", vocab_json("\n")}, {"merges.txt", merges_txt},
                                          {"text", "hello world<|endoftext|>"}}));
  Put(t, "unsupported.json", R"({"model": {"type": "WordPiece", "vocab": {}}, "normalizer": {"type": "NFC"}})");
  Put(t, "hostile.json", absl::StrCat(R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"vocab": {"a": 4294967295,)",
                                      R"( "b": 0}, "merges": [["a", "b"], "a", 5]}, "added_tokens": [{"id": 4294967295,)",
                                      R"( "content": "x"}]})"));
}

// ---- the shard server's streams (programs: shard_chunks_fuzz.cc) ----
std::string Rec(const std::string& bytes) {
  const uint16_t n = static_cast<uint16_t>(bytes.size());
  return std::string(reinterpret_cast<const char*>(&n), 2) + bytes;
}
std::string U8(int v) { return std::string(1, static_cast<char>(v)); }
template <typename T>
std::string Raw(const T& v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(v));
}

void ShardChunks() {
  const std::string t = "shard_chunks_fuzz";
  auto chunk = [](int64_t offset, const std::string& data, bool last, const std::string& part = "part-00000.safetensors") {
    v1::Chunk c;
    c.set_job_id("j-000001"), c.set_step(10), c.set_part(part), c.set_offset(offset), c.set_data(data);
    c.set_crc32c(Crc32c(data.data(), data.size())), c.set_last(last);
    return c.SerializeAsString();
  };
  v1::CommitRequest commit;
  commit.set_job_id("j-000001"), commit.set_step(10), commit.add_parts("part-00000.safetensors");
  commit.set_manifest_json(R"({"step": 10})");
  v1::ReadChunksRequest read;
  read.set_job_id("j-000001"), read.set_step(10), read.set_part("part-00000.safetensors");
  v1::ReadChunksRequest ranged = read;
  ranged.set_offset(3), ranged.set_length(6);
  v1::ListCheckpointsRequest list;
  list.set_job_id("j-000001");
  v1::DeleteCheckpointRequest del;
  del.set_job_id("j-000001"), del.set_step(10);
  // op 0 with (n - 1) << 4: a stream of n chunks (crc made right; bit 3: as given).
  const std::string write2 = U8(0 | (1 << 4)) + Rec(chunk(0, "hello ", false)) + Rec(chunk(6, "world", true));
  Put(t, "write_commit_read", write2 + U8(1) + Rec(commit.SerializeAsString()) + U8(2) + Rec(read.SerializeAsString()) +
                                  U8(2) + Rec(ranged.SerializeAsString()) + U8(3) + Rec(list.SerializeAsString()) + U8(4) +
                                  Rec(del.SerializeAsString()) + U8(2) + Rec(read.SerializeAsString()));
  Put(t, "gap", U8(0 | (1 << 4)) + Rec(chunk(0, "abc", false)) + Rec(chunk(5, "def", true)) + U8(1) +
                    Rec(commit.SerializeAsString()));
  Put(t, "bad_crc", U8(0 | 8) + Rec(chunk(0, "abc", true)));
  Put(t, "no_last", U8(0) + Rec(chunk(0, "abc", false)) + U8(1) + Rec(commit.SerializeAsString()));
  v1::Chunk bad_name;
  bad_name.set_job_id("../etc"), bad_name.set_part("passwd"), bad_name.set_step(-1);
  Put(t, "bad_names", U8(0) + Rec(bad_name.SerializeAsString()));
  v1::ReadChunksRequest huge = read;
  huge.set_offset(int64_t{1} << 62), huge.set_length(int64_t{1} << 62);
  Put(t, "huge_range", write2 + U8(1) + Rec(commit.SerializeAsString()) + U8(2) + Rec(huge.SerializeAsString()));
  // op 5 with n << 4: the client reading [offset, offset + length) from a scripted server's n chunks.
  Put(t, "client_read", U8(5 | (2 << 4)) + Raw<uint32_t>(0) + Raw<uint16_t>(11) + Rec(chunk(0, "hello ", false)) +
                            Rec(chunk(6, "world", true)));
  Put(t, "client_read_bad", U8(5 | (2 << 4) | 0x80) + Raw<uint32_t>(3) + Raw<uint16_t>(4) + Rec(chunk(3, "lo", false)) +
                                Rec(chunk(9, "rld", true)));
}

// ---- the parameter server's wire (programs: param_wire_fuzz.cc) ----
void ParamWire() {
  const std::string t = "param_wire_fuzz";
  auto header = [](uint32_t op, int64_t step, int64_t offset, int64_t count, uint32_t buffer, const std::string& job) {
    net::ParamWireHeader h;
    h.op = op, h.generation = 1, h.step = step, h.lr = 1e-3, h.offset = offset, h.count = count, h.buffer = buffer;
    h.job_len = static_cast<uint32_t>(job.size());
    return Raw(h) + job;
  };
  const std::vector<float> vals(8, 0.5f);
  const std::string payload(reinterpret_cast<const char*>(vals.data()), vals.size() * 4);
  // op 0: raw bytes on one connection: write, read, push of the whole range (AdamW runs).
  Put(t, "raw_write_read", U8(0) + Rec(header(3, 0, 1024, 8, 0, "j-000001") + payload + header(2, 0, 1024, 8, 1, "j-000001")));
  std::string grad(2048 * 4, '\0');
  Put(t, "raw_full_push", U8(0) + Rec(header(1, 1, 1024, 2048, 0, "j-000001") + grad));
  Put(t, "raw_bad_magic", U8(0) + Rec(std::string(56, 'x')));
  Put(t, "raw_unknown_job", U8(0) + Rec(header(3, 0, 1024, 8, 0, "nobody") + payload));
  Put(t, "raw_out_of_range", U8(0) + Rec(header(2, 0, 3000, 100, 7, "j-000001")));
  // op 1 with (n - 1) << 3: n built requests: op, step+8, lr bits, offset-1024 (16 bits), count, buffer, payload.
  auto built = [&](uint8_t op, uint8_t step8, uint16_t off, int32_t count, uint8_t buffer, const std::string& pay) {
    return U8(op) + U8(step8) + Raw<uint64_t>(0x3f50624dd2f1a9fcull) + Raw(off) + Raw(count) + U8(buffer) + Rec(pay);
  };
  Put(t, "built_push_write", U8(1 | (1 << 3)) + built(1, 9, 0, 8, 0, payload) + built(3, 8, 8, 8, 2, payload));
  Put(t, "built_negative", U8(1) + built(2, 8, 0xffff, -1, 3, ""));
  // ops 2-5: gRPC InitRange, WriteParams, PushGradients, ReadParams.
  v1::InitRangeRequest init;
  init.set_job_id("x"), init.set_generation(2), init.mutable_range()->set_begin(0), init.mutable_range()->set_end(16);
  init.set_beta1(0.9), init.set_beta2(0.999), init.set_eps(1e-8), init.set_step(3);
  auto* d = init.add_decay();
  d->set_begin(4), d->set_end(100);
  v1::ParamsChunk write;
  write.set_job_id("j-000001"), write.set_generation(1), write.set_offset(1030), write.set_data(payload);
  write.set_buffer(v1::ADAM_V);
  v1::GradientChunk push;
  push.set_job_id("j-000001"), push.set_generation(1), push.set_step(1), push.set_lr(0.01), push.set_offset(1024);
  push.set_data(grad);
  v1::ReadParamsRequest rd;
  rd.set_job_id("j-000001"), rd.set_generation(1), rd.set_offset(1024), rd.set_count(2048);
  Put(t, "grpc_all", U8(2) + Rec(init.SerializeAsString()) + U8(3) + Rec(write.SerializeAsString()) + U8(4) +
                         Rec(push.SerializeAsString()) + U8(5) + Rec(rd.SerializeAsString()));
  v1::InitRangeRequest absurd = init;
  absurd.mutable_range()->set_end(int64_t{1} << 62);
  Put(t, "grpc_absurd_range", U8(2 | (1 << 5)) + Rec(absurd.SerializeAsString()));
}

// ---- the coordinator (programs: coordinator_fuzz.cc) ----
void Coordinator() {
  const std::string t = "coordinator_fuzz";
  const std::string spec =
      "name: tiny\nmodel: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\n"
      "data: {train: /nonexistent.bin}\ntrain: {steps: 100, micro_batch: 1, lr: 1.0e-3}\n"
      "checkpoint: {every: 10, dir: runs/x}\n";
  auto msg = [](const google::protobuf::Message& m) { return Rec(m.SerializeAsString()); };
  v1::WorkerMessage reg;
  reg.mutable_register_()->set_host("h1"), reg.mutable_register_()->set_device_kind("cpu");
  reg.mutable_register_()->set_device_count(1), reg.mutable_register_()->set_memory_bytes(int64_t{8} << 30);
  v1::WorkerMessage hb;
  hb.mutable_heartbeat()->set_time_unix_ms(1), hb.mutable_heartbeat()->set_job_id("j-000001");
  hb.mutable_heartbeat()->set_generation(1);
  auto* rp = hb.mutable_heartbeat()->add_ranks();
  rp->set_rank(0), rp->set_collectives_done(5), rp->set_step(1);
  v1::WorkerMessage step;
  step.mutable_step()->set_job_id("j-000001"), step.mutable_step()->set_generation(1);
  step.mutable_step()->mutable_report()->set_step(1), step.mutable_step()->mutable_report()->set_loss(2.5f);
  step.mutable_step()->mutable_report()->set_step_seconds(0.01);
  step.mutable_step()->mutable_report()->add_moe_tokens_per_expert(3);
  v1::WorkerMessage part;
  part.mutable_checkpoint_part()->set_job_id("j-000001"), part.mutable_checkpoint_part()->set_generation(1);
  part.mutable_checkpoint_part()->set_step(10), part.mutable_checkpoint_part()->set_bytes(100);
  part.mutable_checkpoint_part()->set_manifest_json(R"({"step": 10})");
  auto* pf = part.mutable_checkpoint_part()->add_files();
  pf->set_name("part-00000.safetensors"), pf->set_shard_server("127.0.0.1:1");
  v1::WorkerMessage done;
  done.mutable_done()->set_job_id("j-000001"), done.mutable_done()->set_generation(1), done.mutable_done()->set_ok(true);
  v1::WorkerMessage failed = done;
  failed.mutable_done()->set_ok(false), failed.mutable_done()->set_error("lost a peer"), failed.mutable_done()->set_code(14);
  failed.mutable_done()->add_unreachable_shard_servers("127.0.0.1:1");
  v1::RegisterShardServerRequest shard;
  shard.set_address("127.0.0.1:1"), shard.set_bytes_stored(100), shard.set_data_address("127.0.0.1:2");
  v1::RendezvousPutRequest put;
  put.set_job_id("j-000001"), put.set_generation(1), put.set_key("nccl"), put.set_value("id");
  v1::RendezvousGetRequest get;
  get.set_job_id("j-000001"), get.set_generation(1), get.set_key("nccl"), get.set_wait_ms(5);
  v1::ListJobsRequest list;
  const std::string submit = U8(0) + Rec(spec);
  // A job's life: submitted, a worker attaches and is placed it, reports, checkpoints, ends.
  Put(t, "job_life", submit + U8(10) + msg(shard) + U8(6) + U8(7) + msg(reg) + U8(7) + msg(hb) + U8(8) + msg(put) +
                         U8(9) + msg(get) + U8(7) + msg(step) + U8(7) + msg(part) + U8(1) + U8(0) + U8(4 | 0x10) + U8(0) +
                         Raw<uint64_t>(0) + U8(2) + msg(list) + U8(5) + U8(7) + msg(done) + U8(11));
  Put(t, "job_fails", submit + U8(6) + U8(7) + msg(reg) + U8(7) + msg(failed) + U8(3) + U8(0) + U8(1) + U8(0));
  Put(t, "two_workers", U8(0) + Rec(spec + "parallel: {dp: 2}\n") + U8(6) + U8(6) + U8(7) + msg(reg) + U8(7 | 0x10) +
                            msg(reg) + U8(7) + msg(hb) + U8(11 | 0x10) + U8(2) + msg(list));
  Put(t, "no_register", U8(6) + U8(7) + msg(hb) + U8(7) + msg(step));
  Put(t, "bad_spec", U8(0) + Rec("model: {n_layer: x}\n") + U8(0) + Rec("[") + U8(1) + U8(0xff) + Rec("../x") + U8(3) +
                         U8(0xff) + Rec(""));
  Put(t, "cancel_watch", submit + U8(3) + U8(0) + U8(4 | 0x10) + U8(0) + Raw<uint64_t>(1) + U8(4) + U8(0xff) + Rec("nope") +
                             Raw<uint64_t>(~0ull));
}

// ---- principals files (common/principals.h) ----
void PrincipalsFiles() {
  const std::string t = "principals_fuzz";
  const std::string h1(64, 'a'), h2 = std::string(63, '0') + "1", h3 = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08";
  const std::string example =
      "users:\n"
      "  - name: alice\n    team: vision\n    role: user\n    token_sha256: " + h1 + "\n"
      "  - name: bob\n    role: admin\n    token_sha256: " + h2 + "\n    certificate: bob.ops.example.org\n"
      "  - name: carol\n    team: nlp\n    role: viewer\n    certificate: gantry client\n"
      "services:\n"
      "  - name: gpu-pool-a\n    kind: worker\n    token_sha256: " + h3 + "\n"
      "  - name: shard-1\n    kind: shardserver\n    certificate: shard-1.gantry.svc\n";
  Put(t, "example.yaml", example);
  Put(t, "flow.yaml", "users: [{name: root, role: admin, token_sha256: " + h1 + "}]\nservices: [{name: w, kind: worker, "
                      "certificate: w.example}]\n");
  Put(t, "services_only.yaml", "services:\n  - {name: s1, kind: shardserver, token_sha256: " + h2 + "}\n");
  Put(t, "anchors.yaml", "users:\n  - &a {name: a, role: viewer, certificate: a}\n  - *a\n");
  Put(t, "bad_role.yaml", "users:\n  - name: x\n    role: superuser\n    token_sha256: " + h1 + "\n");
  Put(t, "dup_token.yaml", "users:\n  - {name: x, role: admin, token_sha256: " + h1 + "}\n  - {name: y, role: viewer, "
                           "token_sha256: " + h1 + "}\n");
  Put(t, "token_not_hash.yaml", "users:\n  - {name: x, role: admin, token_sha256: s3cr3t-t0k3n-pasted-here}\n");
  Put(t, "malformed.yaml", "users:\n  - name: x\n    role: [admin\n");
  Put(t, "crlf.yaml", "users:\r\n  - name: x\r\n    role: admin\r\n    bogus: 1\r\n");
  Put(t, "empty.yaml", "");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_make_corpus SOURCE_DIR OUT_DIR\n");
    return 2;
  }
  g_out = argv[2];
  JobSpecs(argv[1]);
  Safetensors();
  HfConfigs();
  TokenFiles();
  Checkpoints();
  Tokenizers();
  ShardChunks();
  ParamWire();
  Coordinator();
  PrincipalsFiles();
  fs::remove_all(fs::temp_directory_path() / absl::StrCat("gantry-corpus-", getpid()));
  return 0;
}
