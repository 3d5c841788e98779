// All-reduce bus bandwidth of gantry's Communicator against Gloo's allreduce called
// directly, same sizes (4 KB to 256 MB), same ranks, same run. Ranks are threads of this
// process over loopback TCP.
//   allreduce_bench [--ranks N] [--max-mb M] [--iters I]
// Bus bandwidth = 2(n-1)/n x bytes / time. Target: Communicator >= 0.95x Gloo from 1 MB up.
#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "worker/parallel/gloo_communicator.h"

namespace {

void Sum(void* o, const void* a, const void* b, size_t n) {
  auto* out = static_cast<float*>(o);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] + y[i];
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2, max_mb = 256, iters = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--ranks")) ranks = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--max-mb")) max_mb = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--iters")) iters = std::atoi(argv[i + 1]);
  }
  std::vector<size_t> sizes;
  for (size_t b = 4096; b <= static_cast<size_t>(max_mb) << 20; b *= 4) sizes.push_back(b);
  // results[size index] = {gantry seconds, gloo seconds}: the slowest rank's median.
  std::vector<std::vector<double>> g_times(sizes.size()), d_times(sizes.size());
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  auto store2 = std::make_shared<gloo::rendezvous::HashStore>();
  std::barrier sync(ranks);
  std::vector<std::thread> threads;
  std::mutex mu;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      auto comm = gantry::parallel::GlooCommunicator::Create(r, ranks, store, {});
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto ctx = std::make_shared<gloo::rendezvous::Context>(r, ranks);
      auto device = gloo::transport::tcp::CreateDevice(attr);
      ctx->connectFullMesh(*store2, device);
      if (!comm.ok()) {
        std::fprintf(stderr, "%s\n", std::string(comm.status().message()).c_str());
        std::exit(1);
      }
      uint32_t tag = 1u << 20;
      for (size_t si = 0; si < sizes.size(); ++si) {
        const size_t n = sizes[si] / sizeof(float);
        std::vector<float> buf(n, 1.0f);
        std::vector<double> gt, dt;
        for (int it = 0; it < iters + 1; ++it) {
          sync.arrive_and_wait();
          auto t0 = std::chrono::steady_clock::now();
          (void)(*comm)->AllReduceSum(buf.data(), n);
          const double a = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          sync.arrive_and_wait();
          t0 = std::chrono::steady_clock::now();
          gloo::AllreduceOptions o(ctx);
          o.setOutput(buf.data(), n);
          o.setReduceFunction(&Sum);
          o.setTag(tag++);
          gloo::allreduce(o);
          const double b = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (it > 0) {  // the first is a warm-up
            gt.push_back(a);
            dt.push_back(b);
          }
        }
        std::sort(gt.begin(), gt.end());
        std::sort(dt.begin(), dt.end());
        std::lock_guard<std::mutex> l(mu);
        g_times[si].push_back(gt[gt.size() / 2]);
        d_times[si].push_back(dt[dt.size() / 2]);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::printf("all-reduce, %d ranks (threads, loopback TCP), median of %d, slowest rank\n", ranks, iters);
  std::printf("%12s %14s %14s %8s\n", "bytes", "gantry GB/s", "gloo GB/s", "ratio");
  bool ok = true;
  for (size_t si = 0; si < sizes.size(); ++si) {
    const double g = *std::max_element(g_times[si].begin(), g_times[si].end());
    const double d = *std::max_element(d_times[si].begin(), d_times[si].end());
    const double factor = 2.0 * (ranks - 1) / ranks * static_cast<double>(sizes[si]) / 1e9;
    const double ratio = d / g;
    if (sizes[si] >= (1u << 20) && ratio < 0.95) ok = false;
    std::printf("%12zu %14.3f %14.3f %7.2fx\n", sizes[si], factor / g, factor / d, ratio);
  }
  std::printf("target >= 0.95x from 1 MB up: %s\n", ok ? "met" : "NOT met");
  return 0;
}
