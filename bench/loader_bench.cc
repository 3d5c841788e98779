// The data loader against the step it feeds, in the same run: micro-batches per second that
// data/dataset.h reads (shuffled rows out of memory-mapped shards, ids checked) against
// micro-batches per second that a training step consumes, for the demo's shape (4 x 128, T 64,
// B 12) and for GPT-2 124M's shape of batch (T 1024, B 8) fed to a 6 x 384 model, both with
// GPT-2's vocabulary (50304) as the shards' ids need.
//   loader_bench [--shards N] [--shard-tokens N] [--seconds S] [--steps N]
// The shards are random ids written to a temp directory (page cache warm: what a run sees after
// its first epoch; the first epoch's disk reads are the kernel's read-ahead, which Prefetch asks
// for one micro-batch ahead).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/rng.h"
#include "kernels/threads.h"
#include "jobspec/job_spec.h"
#include "tests/test_util.h"
#include "data/dataset.h"
#include "data/token_file.h"
#include "worker/train/trainer.h"

namespace gantry {
namespace {

using Clock = std::chrono::steady_clock;

// Micro-batches per second the loader reads: B rows of T+1 each, shuffled, for `seconds`.
double LoaderRate(const data::Dataset& d, int B, int T, double seconds) {
  std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
  const auto t0 = Clock::now();
  int64_t n = 0;
  double s = 0;
  do {
    for (int i = 0; i < 64; ++i, ++n) {
      if (!d.Fill(n * B, B, 1337, true, in.data(), tg.data()).ok()) return 0;
      d.Prefetch((n + 1) * B, B, 1337, true);
    }
    s = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (s < seconds);
  return static_cast<double>(n) / s;
}

// Micro-batches per second a training step of this model consumes (median step time).
double StepRate(const std::string& train_glob, int layers, int embd, int heads, int B, int T, int steps) {
  auto spec = jobspec::ParseJobSpec(absl::StrCat(
      "model: {n_layer: ", layers, ", n_head: ", heads, ", n_embd: ", embd, ", vocab_size: 50304, seq_len: ", T,
      "}\ndata: {train: \"", train_glob, "\", shuffle: true}\ntrain: {steps: ", steps, ", micro_batch: ", B,
      ", global_batch: ", B, ", lr: 1.0e-4, seed: 1}\n"));
  if (!spec.ok()) return 0;
  train::TrainOptions o;
  FILE* null = std::fopen("/dev/null", "w");
  o.out = null;
  auto t = train::Trainer::Create(*spec, o);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", std::string(t.status().message()).c_str());
    return 0;
  }
  const bool ok = (*t)->Run().ok();
  std::fclose(null);
  if (!ok) return 0;
  std::vector<double> secs;
  for (const auto& r : (*t)->reports()) secs.push_back(r.seconds);
  std::sort(secs.begin(), secs.end());
  return secs.empty() ? 0 : 1.0 / secs[secs.size() / 2];
}

int Main(int argc, char** argv) {
  int64_t shards = 8, shard_tokens = int64_t{8} << 20;
  double seconds = 2;
  int steps = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    bool ok = true;
    if (a == "--shards") ok = absl::SimpleAtoi(argv[i + 1], &shards) && shards >= 1;
    else if (a == "--shard-tokens") ok = absl::SimpleAtoi(argv[i + 1], &shard_tokens) && shard_tokens > 1100;
    else if (a == "--seconds") ok = absl::SimpleAtod(argv[i + 1], &seconds) && seconds > 0;
    else if (a == "--steps") ok = absl::SimpleAtoi(argv[i + 1], &steps) && steps >= 2;
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "usage: loader_bench [--shards N] [--shard-tokens N] [--seconds S] [--steps N]\n");
      return 2;
    }
  }
  testing::TempDir dir;
  Rng rng(7);
  for (int64_t s = 0; s < shards; ++s) {
    std::vector<uint16_t> toks(static_cast<size_t>(shard_tokens));
    for (auto& t : toks) t = static_cast<uint16_t>(rng.Below(50257));
    char name[32];
    std::snprintf(name, sizeof(name), "train_%06ld.bin", static_cast<long>(s));
    if (!data::WriteTokenFile(dir.File(name), toks).ok()) return 1;
  }
  const std::string glob = dir.File("train_*.bin");
  const std::string threads = kernels::ConfigureThreads(0);
  std::printf("loader_bench: %ld shards of %ld tokens (uint16); the step on %s\n", static_cast<long>(shards),
              static_cast<long>(shard_tokens), threads.c_str());
  struct Shape {
    const char* name;
    int layers, embd, heads, B, T;
  };
  for (const Shape& sh : {Shape{"4x128 (the demo's shape), B 12, T 64", 4, 128, 4, 12, 64},
                          Shape{"6x384, B 8, T 1024", 6, 384, 6, 8, 1024}}) {
    auto d = data::Dataset::Open(glob, sh.T, 50304);
    if (!d.ok()) {
      std::fprintf(stderr, "%s\n", std::string(d.status().message()).c_str());
      return 1;
    }
    const double loader = LoaderRate(**d, sh.B, sh.T, seconds);
    const double step = StepRate(glob, sh.layers, sh.embd, sh.heads, sh.B, sh.T, steps);
    std::printf("%-32s loader %10.0f micro-batches/s (%.2e tokens/s) | step %8.2f micro-batches/s | loader/step %.0fx\n",
                sh.name, loader, loader * sh.B * sh.T, step, step > 0 ? loader / step : 0.0);
  }
  return 0;
}

}  // namespace
}  // namespace gantry

int main(int argc, char** argv) { return gantry::Main(argc, argv); }
