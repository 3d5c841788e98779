// The harness of the collective benchmarks (allreduce_bench, alltoall_bench): a collective
// through gantry's Communicator against the same Gloo routine called directly, on the same
// ranks and buffers, in the same run. Ranks are threads of this process over loopback TCP;
// each rank joins two groups of the same ranks, one for the Communicator and one for the
// direct calls, so their tags never meet.
//
// Both sides run the same Gloo routine, so the true ratio is 1 and the spread is this
// machine's noise (2 vCPUs shared by the ranks and Gloo's loop threads), which comes in
// phases longer than one call. So each iteration times both sides back to back, in
// alternating order (neither always finds the caches and the sockets as the other left
// them), each as the slowest rank's time, and the figure judged is the median over
// iterations of the paired ratio gloo time / gantry time. The medians of each side are
// printed beside it.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo/gloo_communicator.h"

namespace gantry::bench {

// One rank's two ways of running the collective once on its buffers of one size.
struct Sides {
  std::function<void()> ours;    // through the Communicator
  std::function<void()> direct;  // Gloo called directly on the rank's own context
};
// The rank's Sides for a size of `bytes` (the closures own the buffers): comm is its
// Communicator, ctx its Gloo context, next_tag a tag for each direct call.
using MakeSides = std::function<Sides(comm::Communicator& comm, const std::shared_ptr<gloo::Context>& ctx,
                                      uint32_t* next_tag, size_t bytes)>;

struct Row {
  size_t bytes;
  double ours_s, direct_s;  // medians over iterations of the slowest rank's seconds
  double paired;            // median over iterations of direct / ours
};

// Sizes from `from` to `to` bytes, by factors of 4.
inline std::vector<size_t> SizesBy4(size_t from, size_t to) {
  std::vector<size_t> sizes;
  for (size_t b = from; b <= to; b *= 4) sizes.push_back(b);
  return sizes;
}

// Runs iters to 200 alternated pairs per size (small sizes get more: their times are short
// and noisy; up to 64 MiB a side), after one warm-up pair. Each side of a pair runs the collective
// max(1, batch_bytes / bytes) times back to back and counts the mean (as nccl-tests times a
// batch of iterations): a call of tens of microseconds is otherwise at the mercy of one late
// wake-up of a thread. 0: one call per side.
inline std::vector<Row> RunPairs(int ranks, const std::vector<size_t>& sizes, int iters, const MakeSides& make,
                                 size_t batch_bytes = 0) {
  // [size][rank][iteration] seconds, for gantry's Communicator and for Gloo called directly.
  std::vector<std::vector<std::vector<double>>> g_runs(sizes.size()), d_runs(sizes.size());
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  auto store2 = std::make_shared<gloo::rendezvous::HashStore>();
  std::barrier sync(ranks);
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = comm::GlooCommunicator::Create(r, ranks, store, {});
      if (!comm.ok()) {
        std::fprintf(stderr, "%s\n", std::string(comm.status().message()).c_str());
        std::exit(1);
      }
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto ctx = std::make_shared<gloo::rendezvous::Context>(r, ranks);
      auto device = gloo::transport::tcp::CreateDevice(attr);
      ctx->connectFullMesh(*store2, device);
      uint32_t tag = 1u << 20;
      for (size_t si = 0; si < sizes.size(); ++si) {
        const Sides sides = make(**comm, ctx, &tag, sizes[si]);
        const size_t calls = std::max<size_t>(1, batch_bytes / sizes[si]);
        auto timed = [&](const std::function<void()>& f) {
          sync.arrive_and_wait();
          const auto t0 = std::chrono::steady_clock::now();
          for (size_t c = 0; c < calls; ++c) f();
          return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(calls);
        };
        std::vector<double> gt, dt;
        const int count =
            std::clamp(static_cast<int>((size_t{64} << 20) / std::max(sizes[si], batch_bytes)), iters, 200);
        for (int it = 0; it < count + 1; ++it) {
          double a, b;
          if (it % 2 == 0) {
            a = timed(sides.ours);
            b = timed(sides.direct);
          } else {
            b = timed(sides.direct);
            a = timed(sides.ours);
          }
          if (it > 0) {  // the first is a warm-up
            gt.push_back(a);
            dt.push_back(b);
          }
        }
        std::lock_guard<std::mutex> l(mu);
        g_runs[si].push_back(gt);
        d_runs[si].push_back(dt);
      }
    });
  }
  for (auto& t : threads) t.join();
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::vector<Row> rows;
  for (size_t si = 0; si < sizes.size(); ++si) {
    const size_t n = g_runs[si][0].size();
    std::vector<double> g(n, 0), d(n, 0), paired(n);
    for (size_t i = 0; i < n; ++i) {
      for (size_t r = 0; r < g_runs[si].size(); ++r) {
        g[i] = std::max(g[i], g_runs[si][r][i]);
        d[i] = std::max(d[i], d_runs[si][r][i]);
      }
      paired[i] = d[i] / g[i];
    }
    rows.push_back({sizes[si], median(g), median(d), median(paired)});
  }
  return rows;
}

// Prints the table: bus bandwidth (bus_bytes(bytes) / seconds) of each side, the ratio of
// the medians and the paired ratio; then whether the paired ratio reached `target` at every
// size from `target_from` bytes up. Returns that.
inline bool PrintRows(const std::vector<Row>& rows, const std::function<double(size_t)>& bus_bytes, double target,
                      size_t target_from) {
  std::printf("%12s %12s %12s %8s %13s\n", "bytes", "gantry GB/s", "gloo GB/s", "ratio", "paired ratio");
  bool ok = true;
  for (const Row& row : rows) {
    const double gb = bus_bytes(row.bytes) / 1e9;
    if (row.bytes >= target_from && row.paired < target) ok = false;
    std::printf("%12zu %12.3f %12.3f %7.2fx %12.2fx\n", row.bytes, gb / row.ours_s, gb / row.direct_s,
                row.direct_s / row.ours_s, row.paired);
  }
  std::printf("target >= %.2fx from %zu bytes up (paired ratio): %s\n", target, target_from, ok ? "met" : "NOT met");
  return ok;
}

}  // namespace gantry::bench
