// A ZeRO-3 training step with the next unit's all-gather prefetched while the current unit
// computes, against the same step with each gather waited for where it is needed (the
// engine before prefetch). Ranks are threads of this process over loopback TCP (Gloo), one
// compute thread each; the two modes alternate run by run (so a slow spell of the machine
// hits both) and the ratio is the median of the per-pair ratios.
//   zero3_prefetch_bench [--ranks 2] [--n-layer 6] [--n-embd 384] [--n-head 6] [--seq-len 128]
//                        [--batch 4] [--vocab 256] [--steps 6] [--repeats 5]
// Prints, per mode, the median step ms and the exposed communication ms per step (the
// training thread waiting on collectives), then the paired ratio prefetch / no prefetch.
#include <gloo/rendezvous/hash_store.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/rng.h"
#include "kernels/threads.h"
#include "model/gpt.h"
#include "comm/gloo/gloo_communicator.h"
#include "worker/train/zero.h"

namespace {

struct Figures {
  double step_ms = 0;     // the slowest rank's median step
  double exposed_ms = 0;  // rank 0's mean exposed communication per step
};

// One run: `steps` ZeRO-3 steps (after one warm-up step) on every rank; the figures.
Figures RunOnce(int ranks, const gantry::jobspec::GPTConfig& cfg, int B, int T, int steps, bool prefetch) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::barrier sync(ranks);
  std::vector<std::vector<double>> times(static_cast<size_t>(ranks));
  std::vector<double> exposed(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      gantry::kernels::ConfigureThreads(1, r, ranks);
      auto comm = gantry::comm::GlooCommunicator::Create(r, ranks, store, {});
      if (!comm.ok()) {
        std::fprintf(stderr, "zero3_prefetch_bench: %s\n", std::string(comm.status().message()).c_str());
        std::exit(1);
      }
      gantry::model::GPT model(cfg);
      model.InitRandom(0);
      auto engine = gantry::train::ZeroEngine::Create(&model, comm->get(), 3, 25, {0.9, 0.95, 1e-8, 0.1});
      if (!engine.ok()) {
        std::fprintf(stderr, "zero3_prefetch_bench: %s\n", std::string(engine.status().message()).c_str());
        std::exit(1);
      }
      (*engine)->Shard();
      (*engine)->set_prefetch(prefetch);
      std::vector<int32_t> x(static_cast<size_t>(B) * T), y(x.size());
      gantry::Rng rng(static_cast<uint64_t>(r) + 1);
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(cfg.vocab_size)));
        y[i] = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(cfg.vocab_size)));
      }
      for (int s = 0; s <= steps; ++s) {
        sync.arrive_and_wait();
        const auto t0 = std::chrono::steady_clock::now();
        (*engine)->BeginMicroBatch(0, 1);
        const float loss = model.ForwardBackward(x.data(), y.data(), B, T, 1.0f);
        auto res = (*engine)->FinishStep(loss, 1e-4, s + 1, 1.0);
        if (!res.ok()) {
          std::fprintf(stderr, "zero3_prefetch_bench: %s\n", std::string(res.status().message()).c_str());
          std::exit(1);
        }
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const auto timing = (*engine)->TakeTiming();
        if (s == 0) continue;  // warm-up: buffers allocated, connections made
        times[static_cast<size_t>(r)].push_back(dt);
        exposed[static_cast<size_t>(r)] += timing.exposed_comm / steps;
      }
    });
  }
  for (auto& t : threads) t.join();
  Figures f;
  for (auto& ts : times) {
    std::sort(ts.begin(), ts.end());
    f.step_ms = std::max(f.step_ms, ts[ts.size() / 2] * 1e3);
  }
  f.exposed_ms = exposed[0] * 1e3;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2, L = 6, C = 384, H = 6, T = 128, B = 4, V = 256, steps = 6, repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (!std::strcmp(k, "--ranks")) ranks = v;
    else if (!std::strcmp(k, "--n-layer")) L = v;
    else if (!std::strcmp(k, "--n-embd")) C = v;
    else if (!std::strcmp(k, "--n-head")) H = v;
    else if (!std::strcmp(k, "--seq-len")) T = v;
    else if (!std::strcmp(k, "--batch")) B = v;
    else if (!std::strcmp(k, "--vocab")) V = v;
    else if (!std::strcmp(k, "--steps")) steps = v;
    else if (!std::strcmp(k, "--repeats")) repeats = v;
    else { std::fprintf(stderr, "zero3_prefetch_bench: unknown flag %s\n", k); return 2; }
  }
  gantry::jobspec::GPTConfig cfg{T, V, L, H, C};
  if (auto s = cfg.Validate(); !s.ok() || ranks < 2 || steps < 1 || repeats < 1) {
    std::fprintf(stderr, "zero3_prefetch_bench: %s\n", s.ok() ? "ranks >= 2, steps and repeats >= 1" : std::string(s.message()).c_str());
    return 2;
  }
  std::vector<Figures> on, off;
  std::vector<double> ratios;
  for (int i = 0; i < repeats; ++i) {
    Figures a, b;
    if (i % 2 == 0) {
      a = RunOnce(ranks, cfg, B, T, steps, true);
      b = RunOnce(ranks, cfg, B, T, steps, false);
    } else {
      b = RunOnce(ranks, cfg, B, T, steps, false);
      a = RunOnce(ranks, cfg, B, T, steps, true);
    }
    on.push_back(a);
    off.push_back(b);
    ratios.push_back(a.step_ms / b.step_ms);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  auto col = [](const std::vector<Figures>& fs, double Figures::*m) {
    std::vector<double> v;
    for (const auto& f : fs) v.push_back(f.*m);
    return v;
  };
  std::printf("ZeRO-3 step, %d ranks (threads, Gloo over loopback), GPT %dx%dx%d, B %d x T %d, %d steps x %d "
              "alternating runs\n",
              ranks, L, C, H, B, T, steps, repeats);
  std::printf("%-12s %12s %16s\n", "mode", "step ms", "exposed comm ms");
  std::printf("%-12s %12.1f %16.2f\n", "prefetch", median(col(on, &Figures::step_ms)),
              median(col(on, &Figures::exposed_ms)));
  std::printf("%-12s %12.1f %16.2f\n", "no prefetch", median(col(off, &Figures::step_ms)),
              median(col(off, &Figures::exposed_ms)));
  std::printf("step time prefetch / no prefetch: %.3f (median of %d paired ratios; below 1 is faster)\n",
              median(ratios), repeats);
  std::printf("{\"prefetch_ms\": %.2f, \"no_prefetch_ms\": %.2f, \"paired_ratio\": %.4f}\n",
              median(col(on, &Figures::step_ms)), median(col(off, &Figures::step_ms)), median(ratios));
  return 0;
}
