// Checkpoints against their limits, in one run on one disk:
//   write: a rank's part (WriteCheckpointPart: params, m, v of the whole model) against a plain
//          sequential write of the same bytes with the same durability (write + fsync);
//   read:  LoadCheckpoint (every piece into the model and the optimizer state) against a plain
//          sequential read of the same file;
//   stall: the step loop's time per asynchronous checkpoint against the step time, with a
//          checkpoint after every step (and the step time without checkpoints, for the cost of
//          the writer running beside the loop).
// Targets: write and read >= 0.7x the plain figure; stall < 5% of a step.
//   checkpoint_bench [--n-layer 6] [--n-embd 384] [--n-head 6] [--seq-len 256] [--batch 8]
//                    [--steps 8] [--threads 2] [--dir DIR]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/rng.h"
#include "kernels/threads.h"
#include "data/token_file.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/gpt/load_gpt.h"
#include "worker/train/trainer.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The baseline: the same bytes written sequentially and made durable.
double PlainWrite(const std::string& path, const std::vector<char>& bytes) {
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, std::min<size_t>(bytes.size() - off, 64 << 20));
    if (n <= 0) std::abort();
    off += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  return Since(t0);
}

double PlainRead(const std::string& path, std::vector<char>& into) {
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY);
  size_t off = 0;
  for (;;) {
    const ssize_t n = ::read(fd, into.data() + off, std::min<size_t>(into.size() - off, 64 << 20));
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  return Since(t0);
}

int Arg(int argc, char** argv, const char* name, int def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], name)) return std::atoi(argv[i + 1]);
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gantry;
  const int L = Arg(argc, argv, "--n-layer", 6), C = Arg(argc, argv, "--n-embd", 384), H = Arg(argc, argv, "--n-head", 6);
  const int T = Arg(argc, argv, "--seq-len", 256), B = Arg(argc, argv, "--batch", 8);
  const int steps = Arg(argc, argv, "--steps", 8), threads = Arg(argc, argv, "--threads", 2);
  std::string dir = (fs::temp_directory_path() / ("gantry-ckpt-bench-" + std::to_string(::getpid()))).string();
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--dir")) dir = std::string(argv[i + 1]) + "/gantry-ckpt-bench-" + std::to_string(::getpid());
  }
  fs::create_directories(dir);
  kernels::ConfigureThreads(threads);

  // Write and read, five times each, alternating with the baseline.
  model::GPT m({.max_seq_len = T, .vocab_size = 256, .n_layer = L, .n_head = H, .n_embd = C});
  m.InitRandom(1);
  const size_t n = m.num_params();
  std::vector<float> mv(2 * n, 0.5f);
  const std::vector<checkpoint::CheckpointPiece> whole = {{0, n, m.params(), mv.data(), mv.data() + n}};
  const std::string part = dir + "/" + checkpoint::CheckpointPartName(0);
  std::vector<double> w_ours, w_plain, r_ours, r_plain;
  size_t bytes = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    if (!checkpoint::WriteCheckpointPart(dir, 0, m.tensors(), whole).status().ok()) return 1;
    w_ours.push_back(Since(t0));
    bytes = fs::file_size(part);
    std::vector<char> same(bytes, 1);
    w_plain.push_back(PlainWrite(dir + "/plain.bin", same));
    checkpoint::CheckpointState state;
    state.step = 1;
    state.seed = 1;
    if (!checkpoint::WriteCheckpointManifest(dir, m.config(), state, {1, 0}, 1).ok()) return 1;
    t0 = Clock::now();
    if (!checkpoint::LoadCheckpoint(dir, m, mv.data(), mv.data() + n).ok()) return 1;
    r_ours.push_back(Since(t0));
    r_plain.push_back(PlainRead(part, same));
  }
  const double gb = static_cast<double>(bytes) / 1e9;

  // The step loop with and without a checkpoint after every step.
  std::vector<uint16_t> toks(static_cast<size_t>(B) * T * (steps + 2) * 2 + 1);
  Rng rng(3);
  for (auto& t : toks) t = static_cast<uint16_t>(rng.Below(256));
  if (!data::WriteTokenFile(dir + "/train.bin", toks).ok()) return 1;
  auto run = [&](int every, std::vector<double>* stalls) -> double {
    std::string y = "model: {n_layer: " + std::to_string(L) + ", n_head: " + std::to_string(H) + ", n_embd: " +
                    std::to_string(C) + ", vocab_size: 256, seq_len: " + std::to_string(T) + "}\n" +
                    "data: {train: " + dir + "/train.bin}\n" + "train: {steps: " + std::to_string(steps) +
                    ", micro_batch: " + std::to_string(B) + ", lr: 1.0e-4}\n";
    if (every > 0) y += "checkpoint: {every: " + std::to_string(every) + ", keep: 2, dir: " + dir + "/ckpt}\n";
    auto spec = jobspec::ParseJobSpec(y);
    train::TrainOptions o;
    FILE* null = std::fopen("/dev/null", "w");
    o.out = null;
    auto t = train::Trainer::Create(*spec, o);
    if (!t.ok() || !(*t)->Run().ok()) std::abort();
    std::fclose(null);
    std::vector<double> secs;
    for (size_t i = 1; i < (*t)->reports().size(); ++i) {  // the first step warms up
      secs.push_back((*t)->reports()[i].seconds);
      if (stalls) stalls->push_back((*t)->reports()[i].checkpoint_stall_seconds);
    }
    return Median(secs);
  };
  std::vector<double> stalls;
  const double step_plain = run(0, nullptr);
  const double step_ckpt = run(1, &stalls);
  const double stall = Median(stalls);
  fs::remove_all(dir);

  std::printf("checkpoint of GPT %dx%d (%zu parameters): a part of %.1f MB (params, m, v), %d threads\n", L, C, n,
              gb * 1e3, threads);
  std::printf("%-30s %12s %12s %8s\n", "", "gantry GB/s", "plain GB/s", "ratio");
  const double w = gb / Median(w_ours), wp = gb / Median(w_plain), r = gb / Median(r_ours), rp = gb / Median(r_plain);
  std::printf("%-30s %12.3f %12.3f %7.2fx\n", "write (write + fsync)", w, wp, w / wp);
  std::printf("%-30s %12.3f %12.3f %7.2fx\n", "read (page cache warm)", r, rp, r / rp);
  std::printf("step %.1f ms without checkpoints, %.1f ms with one after every step; stall per checkpoint %.2f ms = "
              "%.2f%% of a step\n",
              step_plain * 1e3, step_ckpt * 1e3, stall * 1e3, 100 * stall / step_plain);
  const bool ok = w / wp >= 0.7 && r / rp >= 0.7 && stall < 0.05 * step_plain;
  std::printf("targets (write, read >= 0.7x; stall < 5%% of a step): %s\n", ok ? "met" : "NOT met");
  return 0;
}
