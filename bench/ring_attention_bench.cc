// Context parallelism's ring attention (model/context_parallel.h) on the cpu backend: cp ranks
// as threads of this process over Gloo on loopback, each with cores / cp OpenMP threads, beside
// the unsplit attention (kernels/attention.h, grouped heads expanded; every core) measured in
// the same run. Per sequence length and cp: the slowest rank's forward and backward times, the
// seconds its communication thread spent exchanging and the seconds the rank waited for it
// (the exchange the block computation did not hide), and tokens/s of the whole sequence.
//   ring_attention_bench [--T 4096,8192] [--cp 1,2,4] [--heads 8] [--kv-heads 2] [--hd 64]
//                        [--iters 3]
// The unsplit run keeps B·NH·T² probabilities: it is left out where they would pass 8 GiB.
#include <gloo/rendezvous/hash_store.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo/gloo_communicator.h"
#include "kernels/attention.h"
#include "kernels/gqa.h"
#include "model/context_parallel.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::vector<int> Ints(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    p = std::strchr(p, ',');
    if (p == nullptr) break;
    ++p;
  }
  return v;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> x(n);
  for (float& v : x) v = d(g);
  return x;
}

struct Times {
  double fwd = 0, bwd = 0, exchanging = 0, waited = 0;
  bool ok = true;
};

// The ring over cp ranks; the slowest rank's best iteration (by forward + backward).
Times Ring(int T, int cp, int NH, int NKV, int hd, int iters, const std::vector<float>& qkv,
           const std::vector<float>& dout) {
  const gantry::model::AttentionHeads heads{1, NH, NKV, hd};
  const int W = heads.qkv_width(), C = heads.out_width();
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<Times> per(static_cast<size_t>(cp));
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < cp; ++r) {
    threads.emplace_back([&, r] {
      omp_set_num_threads(std::max(1, cores / cp));
      Times& best = per[static_cast<size_t>(r)];
      const auto shard = *gantry::model::CpSharding::Make(T, cp, r);
      std::unique_ptr<gantry::comm::GlooCommunicator> gloo;
      std::unique_ptr<gantry::comm::CommThread> thread;
      if (cp > 1) {
        auto made = gantry::comm::GlooCommunicator::Create(r, cp, store, {});
        if (!made.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", r, std::string(made.status().message()).c_str());
          best.ok = false;
          return;
        }
        gloo = std::move(*made);
        thread = std::make_unique<gantry::comm::CommThread>(gloo.get());
      }
      const int rows = shard.rows();
      std::vector<float> q(static_cast<size_t>(rows) * W), g(static_cast<size_t>(rows) * C), out(g.size()),
          lse(static_cast<size_t>(NH) * rows), dq(q.size());
      shard.Take(qkv.data(), q.data(), 1, W);
      shard.Take(dout.data(), g.data(), 1, C);
      gantry::model::RingAttention ring(thread.get(), shard);
      best.fwd = best.bwd = 1e30;
      for (int it = 0; it < iters; ++it) {
        if (thread) thread->TakeBusySeconds();
        auto t0 = Clock::now();
        absl::Status s = ring.Forward(out.data(), lse.data(), q.data(), heads);
        const double fwd = Since(t0), fwd_wait = ring.waited_seconds();
        t0 = Clock::now();
        if (s.ok()) s = ring.Backward(dq.data(), g.data(), q.data(), out.data(), lse.data(), heads);
        const double bwd = Since(t0);
        if (!s.ok()) {
          std::fprintf(stderr, "rank %d: %s\n", r, std::string(s.message()).c_str());
          best.ok = false;
          return;
        }
        if (fwd + bwd < best.fwd + best.bwd) {
          best.fwd = fwd;
          best.bwd = bwd;
          best.waited = fwd_wait + ring.waited_seconds();
          best.exchanging = thread ? thread->TakeBusySeconds() : 0;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  Times slowest;
  bool ok = true;
  for (const Times& t : per) {
    ok = ok && t.ok;
    if (t.fwd + t.bwd > slowest.fwd + slowest.bwd) slowest = t;
  }
  slowest.ok = ok;
  return slowest;
}

// The unsplit attention on every core; the best iteration.
Times Unsplit(int T, int NH, int NKV, int hd, int iters, const std::vector<float>& qkv,
              const std::vector<float>& dout) {
  const int C = NH * hd;
  const size_t att = static_cast<size_t>(NH) * T * T;
  std::vector<float> qkv3(static_cast<size_t>(T) * 3 * C), dqkv3(qkv3.size()), probs(att), scratch(att),
      out(static_cast<size_t>(T) * C), dqkv(qkv.size());
  omp_set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
  Times best;
  best.fwd = best.bwd = 1e30;
  for (int it = 0; it < iters; ++it) {
    auto t0 = Clock::now();
    gantry::kernels::gqa_expand(qkv3.data(), qkv.data(), T, NH, NKV, hd);
    gantry::kernels::attention_forward(out.data(), probs.data(), qkv3.data(), 1, T, C, NH);
    const double fwd = Since(t0);
    t0 = Clock::now();
    gantry::kernels::attention_backward(dqkv3.data(), scratch.data(), dout.data(), qkv3.data(), probs.data(), 1, T,
                                        C, NH);
    gantry::kernels::gqa_reduce(dqkv.data(), dqkv3.data(), T, NH, NKV, hd);
    const double bwd = Since(t0);
    if (fwd + bwd < best.fwd + best.bwd) best.fwd = fwd, best.bwd = bwd;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> Ts = {4096, 8192}, cps = {1, 2, 4};
  int NH = 8, NKV = 2, hd = 64, iters = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--T") Ts = Ints(argv[i + 1]);
    else if (flag == "--cp") cps = Ints(argv[i + 1]);
    else if (flag == "--heads") NH = std::atoi(argv[i + 1]);
    else if (flag == "--kv-heads") NKV = std::atoi(argv[i + 1]);
    else if (flag == "--hd") hd = std::atoi(argv[i + 1]);
    else if (flag == "--iters") iters = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (NH <= 0 || NKV <= 0 || hd <= 0 || NH % NKV != 0 || iters <= 0) {
    std::fprintf(stderr, "--heads %d over --kv-heads %d of --hd %d (--iters %d): the query heads must be a positive "
                 "multiple of the key/value heads, every size positive\n", NH, NKV, hd, iters);
    return 2;
  }
  std::printf("ring attention, cpu backend, B 1, %d query heads over %d key/value heads of %d, %u cores, best of %d\n",
              NH, NKV, hd, std::thread::hardware_concurrency(), iters);
  std::printf("%7s %6s %9s %9s %12s %9s %11s\n", "T", "cp", "fwd s", "bwd s", "exchange s", "waited s", "tokens/s");
  for (int T : Ts) {
    if (T <= 0) {
      std::fprintf(stderr, "--T %d: a sequence length must be positive\n", T);
      return 2;
    }
    const int W = (NH + 2 * NKV) * hd;
    const auto qkv = Random(static_cast<size_t>(T) * W, 1), dout = Random(static_cast<size_t>(T) * NH * hd, 2);
    if (static_cast<double>(NH) * T * T * 4 * 2 <= 8.0 * (1 << 30)) {
      const Times u = Unsplit(T, NH, NKV, hd, iters, qkv, dout);
      std::printf("%7d %6s %9.3f %9.3f %12s %9s %11.0f\n", T, "whole", u.fwd, u.bwd, "-", "-", T / (u.fwd + u.bwd));
    } else {
      std::printf("%7d %6s (its B·NH·T² probabilities would pass 8 GiB)\n", T, "whole");
    }
    for (int cp : cps) {
      if (cp < 1 || T % (2 * cp) != 0) {
        std::printf("%7d %6d (T is not a multiple of 2·cp)\n", T, cp);
        continue;
      }
      const Times t = Ring(T, cp, NH, NKV, hd, iters, qkv, dout);
      if (!t.ok) return 1;
      std::printf("%7d %6d %9.3f %9.3f %12.3f %9.3f %11.0f\n", T, cp, t.fwd, t.bwd, t.exchanging, t.waited,
                  T / (t.fwd + t.bwd));
    }
  }
  return 0;
}
