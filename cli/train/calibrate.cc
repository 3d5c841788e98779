#include "cli/train/calibrate.h"

#include <gloo/rendezvous/hash_store.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/gloo/gloo_communicator.h"
#include "common/status.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/threads.h"

namespace gantry::calibrate {

namespace {

using Clock = std::chrono::steady_clock;

// The median seconds of `repeats` runs of f, after one warm-up.
double Median(int repeats, const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto a = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<float> Random(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f = static_cast<float>((x >> 40) & 0xffff) / 65536.0f - 0.5f;
  }
  return v;
}

std::vector<uint16_t> Bf16(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = kernels::Bf16Of(v[i]);
  return b;
}

// A layer's four GEMMs (qkv, attention's projection, the MLP's two) over N rows: the FLOP/s
// forward and backward, in fp32 ([1]) and bf16 ([0]).
void TimeGemms(const Options& o, double fwd[2], double bwd[2]) {
  const int N = o.rows, C = o.n_embd;
  const int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
  for (int half = 0; half < 2; ++half) {
    const kernels::Precision p = half ? kernels::Precision::kBf16 : kernels::Precision::kFp32;
    double flops = 0, tf = 0, tb = 0;
    for (const auto& [in, out] : shapes) {
      std::vector<float> x = Random(static_cast<size_t>(N) * in, 1), w = Random(static_cast<size_t>(in) * out, 2),
                         b = Random(out, 3), y(static_cast<size_t>(N) * out), dy = Random(y.size(), 4),
                         dx(x.size()), dw(w.size()), db(out);
      std::vector<uint16_t> x16 = Bf16(x), w16 = Bf16(w), b16 = Bf16(b), y16(y.size()), dy16 = Bf16(dy), dx16(x.size());
      auto arg = [&](std::vector<float>& f, std::vector<uint16_t>& h) {
        return half ? kernels::Ptr(h.data(), p) : kernels::Ptr(f.data());
      };
      flops += 2.0 * N * in * out;
      tf += Median(o.repeats, [&] { kernels::matmul_forward(arg(y, y16), arg(x, x16), arg(w, w16), arg(b, b16), N, in, out); });
      tb += Median(o.repeats, [&] {
        kernels::matmul_backward(arg(dx, dx16), dw.data(), db.data(), arg(dy, dy16), arg(x, x16), arg(w, w16), N, in, out);
      });
    }
    const int i = half ? 0 : 1;
    fwd[i] = flops / tf;
    bwd[i] = 2 * flops / tb;
  }
}

// Attention over rows / seq_len sequences: the causal half of 4·T·C FLOPs a token forward,
// 2.5 times that backward (the cost model's count).
void TimeAttention(const Options& o, double fwd[2], double bwd[2]) {
  const int T = o.seq_len, B = std::max(1, o.rows / T), C = o.n_embd, NH = o.n_head;
  const size_t bt = static_cast<size_t>(B) * T;
  std::vector<float> qkv = Random(bt * 3 * C, 5), out(bt * C), att(static_cast<size_t>(B) * NH * T * T),
                     scratch(att.size()), dout = Random(bt * C, 6), dqkv(qkv.size());
  std::vector<uint16_t> qkv16 = Bf16(qkv), out16(out.size()), dout16 = Bf16(dout), dqkv16(dqkv.size());
  const double flops = 2.0 * bt * T * C;
  for (int half = 0; half < 2; ++half) {
    const kernels::Precision p = half ? kernels::Precision::kBf16 : kernels::Precision::kFp32;
    auto arg = [&](std::vector<float>& f, std::vector<uint16_t>& h) {
      return half ? kernels::Ptr(h.data(), p) : kernels::Ptr(f.data());
    };
    const double tf = Median(o.repeats, [&] { kernels::attention_forward(arg(out, out16), att.data(), arg(qkv, qkv16), B, T, C, NH, p); });
    const double tb = Median(o.repeats, [&] {
      kernels::attention_backward(arg(dqkv, dqkv16), scratch.data(), arg(dout, dout16), arg(qkv, qkv16), att.data(), B, T,
                                  C, NH);
    });
    const int i = half ? 0 : 1;
    fwd[i] = flops / tf;
    bwd[i] = 2.5 * flops / tb;
  }
}

// Each of `ranks` threads in a Gloo group of them (made with go; pinned as a training rank is
// where pin) runs op once over `big` floats and 100 times over one: the slowest rank's median
// seconds for each, the second the mean of the 100. op(comm, rank, data, spare, n): data holds
// n floats of this rank's, spare room for n more.
using LinkOp = std::function<absl::Status(comm::Communicator&, int rank, float* data, float* spare, size_t n)>;
absl::StatusOr<std::pair<double, double>> TimeBigAndSmall(const Options& o, int ranks, size_t big,
                                                          const comm::GlooOptions& go, bool pin, const LinkOp& op) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<double> t_big(ranks), t_small(ranks);
  std::vector<absl::Status> status(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      if (pin) kernels::ConfigureThreads(o.threads, r, ranks);
      auto comm = comm::GlooCommunicator::Create(r, ranks, store, go);
      if (!comm.ok()) {
        status[r] = comm.status();
        return;
      }
      std::vector<float> data = Random(big, 7 + r), spare(big), one(1, 1.0f), one_spare(1);
      auto run = [&](float* d, float* sp, size_t n, int times) {
        for (int i = 0; i < times; ++i) {
          if (absl::Status s = op(**comm, r, d, sp, n); !s.ok()) status[r] = s;
        }
      };
      t_big[r] = Median(o.repeats, [&] { run(data.data(), spare.data(), big, 1); });
      t_small[r] = Median(o.repeats, [&] { run(one.data(), one_spare.data(), 1, 100); }) / 100;
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : status) RETURN_IF_ERROR(s);
  return std::make_pair(*std::max_element(t_big.begin(), t_big.end()),
                        *std::max_element(t_small.begin(), t_small.end()));
}

// Gloo's all-reduce among o.ranks threads: the bus bandwidth of 16 MB and the latency of 4 bytes
// (the cost model's formula solved for them).
absl::StatusOr<jobspec::Link> TimeGloo(const Options& o) {
  jobspec::Link l;
  if (o.ranks < 2) return absl::InvalidArgumentError("calibrate: --ranks must be >= 2 to time the link");
  const size_t big = 4 << 20;
  ASSIGN_OR_RETURN(auto times, TimeBigAndSmall(o, o.ranks, big, {}, /*pin=*/false,
                                               [](comm::Communicator& c, int, float* d, float*, size_t n) {
                                                 return c.AllReduceSum(d, n);
                                               }));
  const double n = o.ranks;
  const double steps = 2 * std::min(n - 1, std::ceil(std::log2(n)));
  l.latency = times.second / steps;
  const double bytes = big * 4.0;
  l.bandwidth = 2 * (n - 1) / n * bytes / std::max(1e-9, times.first - 2 * (n - 1) * l.latency);
  return l;
}

// Point-to-point transfers between two of this host's ranks as a pipeline's or cp ring's run
// (GlooOptions::shared_memory, as GlooGroups gives those groups): the latency of a 4-byte
// exchange and the bandwidth of a 16 MB one (SendRecv both ways at once, each rank's bytes
// counted once). Ranks as threads, each pinned as a training rank is.
absl::StatusOr<jobspec::Link> TimePointToPoint(const Options& o) {
  const size_t big = 4 << 20;
  comm::GlooOptions go;
  go.shared_memory = true;
  ASSIGN_OR_RETURN(auto times, TimeBigAndSmall(o, 2, big, go, /*pin=*/true,
                                               [](comm::Communicator& c, int r, float* d, float* spare, size_t n) {
                                                 return c.SendRecv(d, n, 1 - r, spare, n, 1 - r);
                                               }));
  jobspec::Link l;
  l.latency = times.second;
  l.bandwidth = big * 4.0 / std::max(1e-9, times.first - l.latency);
  return l;
}

// Compute lost to communication running beside it (DeviceProfile::comm_compute_cost): each of
// o.ranks ranks, its compute pinned as a training rank's is, times a run of GEMMs alone, then
// again while its communication thread all-reduces throughout (as ZeRO's thread does behind
// backward); the GEMMs' lost time over the time the communication ran beside them.
absl::StatusOr<double> TimeCommComputeCost(const Options& o, double allreduce_seconds) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  const int N = o.rows, C = o.n_embd, F = 4 * o.n_embd, reps = 8;
  const size_t big = 4 << 20;
  std::vector<double> alone(o.ranks), shared(o.ranks);
  std::vector<absl::Status> status(o.ranks);
  std::barrier sync(o.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r) {
    threads.emplace_back([&, r] {
      kernels::ConfigureThreads(o.threads, r, o.ranks);
      auto comm = comm::GlooCommunicator::Create(r, o.ranks, store, {});
      if (!comm.ok()) status[r] = comm.status();
      std::vector<float> x = Random(static_cast<size_t>(N) * C, 11 + r), w = Random(static_cast<size_t>(C) * F, 12),
                         y(static_cast<size_t>(N) * F), data = Random(big, 13 + r);
      auto gemms = [&] {
        for (int i = 0; i < reps; ++i) kernels::matmul_forward(y.data(), x.data(), w.data(), nullptr, N, C, F);
      };
      sync.arrive_and_wait();  // every rank computes at once, as in training
      alone[r] = Median(o.repeats, gemms);
      sync.arrive_and_wait();
      // Enough all-reduces to outlast the GEMMs slowed to a third (the same count on every rank).
      const double longest = *std::max_element(alone.begin(), alone.end());
      const int count = static_cast<int>(std::ceil(3.0 * (o.repeats + 1) * longest / std::max(1e-6, allreduce_seconds))) + 2;
      std::thread comm_thread([&] {
        for (int i = 0; i < count && comm.ok(); ++i) {
          if (absl::Status s = (*comm)->AllReduceSum(data.data(), big); !s.ok()) {
            status[r] = s;
            return;
          }
        }
      });
      sync.arrive_and_wait();
      shared[r] = Median(o.repeats, gemms);
      comm_thread.join();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : status) RETURN_IF_ERROR(s);
  double worst = 0;
  for (int r = 0; r < o.ranks; ++r) worst = std::max(worst, (shared[r] - alone[r]) / shared[r]);
  return worst;
}

}  // namespace

absl::StatusOr<jobspec::ClusterSpec> Calibrate(const Options& o) {
  if (o.threads < 1 || o.rows < o.seq_len || o.n_embd % o.n_head != 0 || o.repeats < 1) {
    return absl::InvalidArgumentError("calibrate: threads >= 1, rows >= seq-len, heads dividing n-embd, repeats >= 1");
  }
  kernels::ConfigureThreads(o.threads);
  jobspec::ClusterSpec c;
  jobspec::DeviceProfile& d = c.device;
  d.name = absl::StrCat("cpu-", o.threads, "t");
  d.memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  TimeGemms(o, d.gemm_fwd, d.gemm_bwd);
  TimeAttention(o, d.attention_fwd, d.attention_bwd);
  // MFU's denominator on a CPU: its own fp32 GEMM rate, forward.
  d.peak_flops = d.gemm_fwd[1];
  {  // memory-bound: the residual add (12 bytes an element), over 64 MB arrays
    const size_t n = 16 << 20;
    std::vector<float> a = Random(n, 8), b = Random(n, 9), out(n);
    d.memory_bandwidth = 12.0 * n / Median(o.repeats, [&] { kernels::residual_forward(out.data(), a.data(), b.data(), n); });
    // Offload's host side: AdamW, and the copies to and from "device" memory (the same RAM).
    std::vector<float> m(n), v(n);
    kernels::AdamWParams hp;
    d.host_adamw = n / Median(o.repeats, [&] { kernels::adamw_update(out.data(), a.data(), m.data(), v.data(), n, hp); });
    d.host_link = 4.0 * n / Median(o.repeats, [&] { std::memcpy(b.data(), a.data(), n * sizeof(float)); });
  }
  {  // the least time an op takes: a residual add of 64 elements
    std::vector<float> a(64), b(64), out(64);
    d.launch = Median(o.repeats, [&] {
                 for (int i = 0; i < 1000; ++i) kernels::residual_forward(out.data(), a.data(), b.data(), 64);
               }) / 1000;
  }
  ASSIGN_OR_RETURN(jobspec::Link link, TimeGloo(o));
  {  // a 16 MB all-reduce's time by the link just measured, to size the overlap's run
    const double n = o.ranks, bytes = (4 << 20) * 4.0;
    const double t = 2 * (n - 1) * link.latency + 2 * (n - 1) / n * bytes / link.bandwidth;
    ASSIGN_OR_RETURN(d.comm_compute_cost, TimeCommComputeCost(o, t));
  }
  c.name = absl::StrCat("local-", o.ranks, "x", d.name);
  c.gpus_per_node = o.ranks;
  c.intra = c.inter = link;
  ASSIGN_OR_RETURN(c.intra_p2p, TimePointToPoint(o));
  return c;
}

}  // namespace gantry::calibrate
