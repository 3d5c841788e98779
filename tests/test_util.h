// Helpers shared by Gantry's tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/rng.h"
#include "common/safetensors.h"
#include "nlohmann/json.hpp"
#include "jobspec/model_layout.h"

namespace gantry::testing {

// Polls `holds` every 5 ms until it holds or `limit` passes; returns whether it held. For
// state with nothing to wait on (a heartbeat's contents, a monitor acting in rounds).
inline bool PollUntil(const std::function<bool()>& holds, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!holds()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

inline std::string SourcePath(const std::string& rel) {
  return std::string(GANTRY_SOURCE_DIR) + "/" + rel;
}

// Norm-wise relative error: max |a - b| / max |b|. Elementwise relative error is
// meaningless for entries near zero; this is the usual definition for tensor comparisons.
inline double RelErr(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    // A NaN where the reference has a number (an element never written over its poison)
    // is an infinite error, not one that std::max would skip.
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den > 0 ? num / den : num;
}
inline double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return RelErr(a.data(), b.data(), std::min(a.size(), b.size()));
}

// n values drawn from N(0, scale^2) by Rng(seed).
inline std::vector<float> RandomNormal(size_t n, uint64_t seed, float scale = 1.f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.Normal()) * scale;
  return v;
}

// A token stream with structure, so that a small model's loss falls: runs of 8 tokens
// stepping by 3 (mod 31) from a random start below 20, until there are at least n.
inline std::vector<uint16_t> PatternedTokens(size_t n, uint64_t seed) {
  std::vector<uint16_t> toks;
  Rng rng(seed);
  while (toks.size() < n) {
    const int start = static_cast<int>(rng.Below(20));
    for (int i = 0; i < 8; ++i) toks.push_back(static_cast<uint16_t>((start + i * 3) % 31));
  }
  return toks;
}

inline SafetensorsFile OpenFixture(const std::string& name) {
  auto f = SafetensorsFile::Open(SourcePath("tests/reference/fixtures/" + name));
  if (!f.ok()) {
    ADD_FAILURE() << f.status();
    std::abort();
  }
  return *std::move(f);
}

// The test model of a reference fixture (gpt2_tiny.safetensors, llama_tiny.safetensors: its
// "config" metadata), and the batch shape it was run at. GPT-2's fixtures have no "arch" and
// none of Llama's keys (n_kv_head, ffn_hidden, rope_theta, norm_eps); each absent key keeps
// GPTConfig's default.
inline jobspec::GPTConfig FixtureConfig(const SafetensorsFile& f, int* B, int* T) {
  auto cfg = nlohmann::json::parse(f.metadata().at("config"));
  jobspec::GPTConfig c;
  const std::string arch = cfg.value("arch", "gpt2");
  EXPECT_TRUE(arch == "gpt2" || arch == "llama") << "fixture arch " << arch;
  if (arch == "llama") c.arch = jobspec::Arch::kLlama;
  c.vocab_size = cfg["vocab_size"];
  c.max_seq_len = cfg["n_positions"];
  c.n_layer = cfg["n_layer"];
  c.n_head = cfg["n_head"];
  c.n_embd = cfg["n_embd"];
  c.n_kv_head = cfg.value("n_kv_head", c.n_kv_head);
  c.ffn_hidden = cfg.value("ffn_hidden", c.ffn_hidden);
  c.rope_theta = cfg.value("rope_theta", c.rope_theta);
  c.norm_eps = cfg.value("norm_eps", c.norm_eps);
  *T = cfg["T"];
  *B = cfg["batch"];
  return c;
}

inline std::vector<float> F32(const SafetensorsFile& f, const std::string& name) {
  auto v = f.ReadF32(name);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}
inline std::vector<int32_t> I32(const SafetensorsFile& f, const std::string& name) {
  auto v = f.ReadI32(name);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<int32_t>();
}

// A file's bytes (a test failure and "" where it cannot be read); bytes written over a file
// (a fatal test failure where they cannot be).
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& bytes);

// A fresh temporary directory, removed at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace gantry::testing
