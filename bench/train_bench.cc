// gantry-train's training step (forward, backward, clip, AdamW) timed on random tokens.
//   train_bench --n-layer L --n-embd C --n-head H --seq-len T --vocab V --batch B
//               [--steps N] [--warmup W] [--threads N] [--precision fp32|bf16|fp16]
// Prints one JSON line: tokens/s, median step ms. bench/train_vs_pytorch.py runs it next to
// the PyTorch peer.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/rng.h"
#include "kernels/grad_norm.h"
#include "kernels/threads.h"
#include "model/gpt.h"
#include "optim/adamw.h"

int main(int argc, char** argv) {
  int L = 6, C = 384, H = 6, T = 256, V = 256, B = 8, steps = 10, warmup = 2, threads = 2, profile = 0;
  gantry::kernels::Precision precision = gantry::kernels::Precision::kFp32;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* k = argv[i];
    if (!std::strcmp(k, "--precision")) {
      const std::string p = argv[i + 1];
      if (p != "fp32" && p != "bf16" && p != "fp16") {
        std::fprintf(stderr, "train_bench: --precision is fp32, bf16 or fp16\n");
        return 2;
      }
      precision = p == "bf16" ? gantry::kernels::Precision::kBf16
                  : p == "fp16" ? gantry::kernels::Precision::kFp16
                                : gantry::kernels::Precision::kFp32;
      continue;
    }
    const int v = std::atoi(argv[i + 1]);
    if (!std::strcmp(k, "--n-layer")) L = v;
    else if (!std::strcmp(k, "--n-embd")) C = v;
    else if (!std::strcmp(k, "--n-head")) H = v;
    else if (!std::strcmp(k, "--seq-len")) T = v;
    else if (!std::strcmp(k, "--vocab")) V = v;
    else if (!std::strcmp(k, "--batch")) B = v;
    else if (!std::strcmp(k, "--steps")) steps = v;
    else if (!std::strcmp(k, "--warmup")) warmup = v;
    else if (!std::strcmp(k, "--threads")) threads = v;
    else if (!std::strcmp(k, "--profile")) profile = v;
    else { std::fprintf(stderr, "train_bench: unknown flag %s\n", k); return 2; }
  }
  gantry::kernels::ConfigureThreads(threads);
  gantry::jobspec::GPTConfig cfg{T, V, L, H, C};
  if (auto s = cfg.Validate(); !s.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  gantry::model::GPT model(cfg);
  model.InitRandom(0);
  model.set_precision(precision);
  gantry::optim::AdamW opt(model.tensors(), model.num_params(), {0.9, 0.95, 1e-8, 0.1});
  std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
  gantry::Rng rng(1);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int32_t>(rng.Below(V));
    y[i] = static_cast<int32_t>(rng.Below(V));
  }
  const int64_t n = static_cast<int64_t>(model.num_params());
  std::vector<double> times;
  double t_norm = 0, t_opt = 0, t_zero = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == warmup) {
      model.set_profiling(profile != 0);
      model.ResetProfile();
    }
    using Clock = std::chrono::steady_clock;
    auto secs = [](Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); };
    auto t0 = Clock::now();
    model.ZeroGrad();
    const double dz = secs(t0);
    model.ForwardBackward(x.data(), y.data(), B, T, 1.0f);
    auto t1 = Clock::now();
    const double norm = std::sqrt(gantry::kernels::sum_squares(model.grads(), n));
    const float coef = gantry::kernels::clip_coefficient(norm, 1.0f);
    if (coef < 1.0f) gantry::kernels::scale_inplace(model.grads(), n, coef);
    const double dn = secs(t1);
    auto t2 = Clock::now();
    opt.Step(model.params(), model.grads(), 1e-4, s + 1);
    const double dopt = secs(t2);
    const double dt = secs(t0);
    if (s >= warmup) {
      times.push_back(dt);
      t_norm += dn;
      t_opt += dopt;
      t_zero += dz;
    }
  }
  if (profile) {
    std::vector<std::pair<std::string, double>> ops = model.op_seconds();
    ops.push_back({"zero grad", t_zero});
    ops.push_back({"grad norm + clip", t_norm});
    ops.push_back({"adamw", t_opt});
    double total = 0;
    for (auto& [name, t] : ops) total += t;
    std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second > b.second; });
    std::fprintf(stderr, "%-26s %10s %7s\n", "op (per step)", "ms", "share");
    for (auto& [name, t] : ops) {
      std::fprintf(stderr, "%-26s %10.2f %6.1f%%\n", name.c_str(), t / steps * 1e3, 100 * t / total);
    }
  }
  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  std::printf("{\"impl\": \"gantry\", \"tokens_per_s\": %.1f, \"step_ms\": %.2f, \"threads\": %d, "
              "\"params\": %zu, \"activation_bytes\": %zu}\n",
              B * T / med, med * 1e3, threads, model.num_params(), model.activation_bytes());
  return 0;
}
