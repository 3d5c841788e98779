// Parameter-server mode against its limits, in one run on one machine:
//   AdamW on a shard server's range (the threaded kernel the ParamServer runs): parameters/s
//     against the memory-bandwidth bound, 28 bytes per parameter (read param, grad, m, v;
//     write param, m, v) at the bandwidth of a large in-place pass on the same threads,
//     measured here (read + write bytes);
//   push and pull through the shard server's data port (plain TCP beside its gRPC service):
//     GB/s against a raw TCP stream of the same bytes over loopback;
//   concurrent workers (--workers, default 1,8,64): one job's range of --concurrent-mb MB,
//     each worker its own client and connection. A round: every worker pushes its 1/N share
//     of the gradient at once (the push that completes the range runs AdamW), then every
//     worker pulls the whole range at once, as ranks do after their barrier. Aggregate GB/s
//     of each phase (all bytes over the phase's wall time), best of --rounds (3).
// Targets: AdamW >= 0.6x the bound; push and pull >= 0.6x raw TCP.
//   paramserver_bench [--mparams 32] [--threads 0 (all)] [--mb 256] [--workers 1,8,64] [--concurrent-mb 32]
//                    [--rounds 3] [--data-threads 2 (the data port's event loop threads)]
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/buffer.h"
#include "common/metrics.h"
#include "kernels/adamw.h"
#include "kernels/threads.h"
#include "shardserver/param_service.h"
#include "worker/agent/param_client.h"

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
double Best(std::vector<double> v) { return *std::min_element(v.begin(), v.end()); }
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

const char* StrArg(int argc, char** argv, const char* name, const char* def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], name)) return argv[i + 1];
  }
  return def;
}

int Arg(int argc, char** argv, const char* name, int def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], name)) return std::atoi(argv[i + 1]);
  }
  return def;
}

// Seconds to send `bytes` through a loopback TCP connection (a writer thread, this thread
// reading), in 1 MiB writes.
double RawTcp(size_t bytes) {
  const int srv = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(srv, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(srv, 1) != 0 ||
      ::getsockname(srv, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::abort();
  }
  std::vector<char> out(1 << 20, 7), in(1 << 20);
  std::thread writer([&] {
    const int c = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) std::abort();
    for (size_t sent = 0; sent < bytes;) {
      const ssize_t n = ::write(c, out.data(), std::min(out.size(), bytes - sent));
      if (n <= 0) std::abort();
      sent += static_cast<size_t>(n);
    }
    ::close(c);
  });
  const int conn = ::accept(srv, nullptr, nullptr);
  const auto t0 = Clock::now();
  size_t got = 0;
  for (ssize_t n; (n = ::read(conn, in.data(), in.size())) > 0;) got += static_cast<size_t>(n);
  const double secs = Since(t0);
  writer.join();
  ::close(conn);
  ::close(srv);
  if (got != bytes) std::abort();
  return secs;
}

// Best-of-3 aggregate push and pull rates (GB/s) and round time of `workers` clients of one
// job over one server's range of `bytes`: see the top of the file.
struct Concurrent {
  double push_gbs, pull_gbs, round_ms;                    // best of the rounds
  double median_push_gbs, median_pull_gbs, median_round_ms;  // their medians
};
Concurrent RunConcurrent(const std::string& grpc_address, const std::string& data_address, int workers, size_t bytes,
                         int rounds) {
  using namespace gantry;
  const size_t pn = bytes / sizeof(float);
  jobspec::ParamTensor t;
  t.name = "w";
  t.shape = {static_cast<int64_t>(pn)};
  t.numel = pn;
  const std::string job = "bench-" + std::to_string(workers);
  std::vector<std::unique_ptr<agent::ParamServerClient>> clients;
  for (int w = 0; w < workers; ++w) {
    clients.push_back(std::make_unique<agent::ParamServerClient>(
        job, 1, std::vector<jobspec::ParamRangeOf>{{grpc_address, 0, pn, data_address}},
        std::vector<jobspec::ParamTensor>{t}, pn, kernels::AdamWConfig{}));
  }
  std::vector<float> grads(pn, 0.01f);
  std::vector<std::vector<float>> pulled(static_cast<size_t>(workers), std::vector<float>(pn, 0.5f));
  if (!clients[0]->Init(pulled[0].data(), nullptr, nullptr, 0).ok()) std::abort();
  // Runs fn(w) on every worker's thread at once; the phase's wall time.
  auto phase = [&](auto&& fn) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false}, failed{false};
    std::vector<std::thread> ts;
    for (int w = 0; w < workers; ++w) {
      ts.emplace_back([&, w] {
        ready.fetch_add(1);
        while (!go.load()) std::this_thread::yield();
        if (!fn(w).ok()) failed = true;
      });
    }
    while (ready.load() < workers) std::this_thread::yield();
    const auto t0 = Clock::now();
    go = true;
    for (auto& th : ts) th.join();
    if (failed) {
      std::fprintf(stderr, "paramserver_bench: a worker's request failed at %d workers\n", workers);
      std::abort();
    }
    return Since(t0);
  };
  std::vector<double> push_s, pull_s, round_s;
  for (int step = 1; step <= rounds; ++step) {
    const double push = phase([&](int w) {
      const size_t b = pn * static_cast<size_t>(w) / workers, e = pn * static_cast<size_t>(w + 1) / workers;
      return clients[static_cast<size_t>(w)]->Push(step, 1e-3, grads.data() + b, b, e);
    });
    const double pull = phase([&](int w) { return clients[static_cast<size_t>(w)]->Pull(pulled[static_cast<size_t>(w)].data()); });
    push_s.push_back(push);
    pull_s.push_back(pull);
    round_s.push_back(push + pull);
  }
  for (int w = 1; w < workers; ++w) {  // every worker read the same parameters
    if (pulled[static_cast<size_t>(w)] != pulled[0]) std::abort();
  }
  const double gb = static_cast<double>(pn * sizeof(float)) / 1e9;
  return {gb / Best(push_s),   gb * workers / Best(pull_s),   Best(round_s) * 1e3,
          gb / Median(push_s), gb * workers / Median(pull_s), Median(round_s) * 1e3};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gantry;
  const size_t n = static_cast<size_t>(Arg(argc, argv, "--mparams", 32)) << 20;
  const int threads = Arg(argc, argv, "--threads", 0);
  const size_t net_bytes = static_cast<size_t>(Arg(argc, argv, "--mb", 256)) << 20;
  // AdamW against the copy bandwidth, on a thread of its own: ConfigureThreads pins the thread
  // that calls it to one CPU, and a thread inherits its creator's affinity, so configured on
  // main it would put the data port's loop threads and every client below on that one CPU
  // (0.9 CPUs busy of 2). The shard server configures no threads: they run where the
  // scheduler puts them, as here.
  double copy_bw = 0, bound = 0, adam = 0;
  std::thread([&] {
    kernels::ConfigureThreads(threads);
    // AdamW against the copy bandwidth.
    FloatBuffer p(n), g(n), m(n), v(n), a(4 * n);
    std::fill(g.begin(), g.end(), 0.01f);
    std::fill(a.begin(), a.end(), 1.f);
    std::vector<double> copy_s, adam_s;
    for (int i = 0; i < 5; ++i) {
      auto t0 = Clock::now();
      // An in-place pass (read and write back each element), on the same threads as AdamW:
      // like AdamW's own updates it has no read-for-ownership of a separate destination, so
      // its bytes moved are exactly read + write.
      const int64_t total = static_cast<int64_t>(a.size());
      float* x = a.data();
#pragma omp parallel for simd schedule(static)
      for (int64_t c = 0; c < total; ++c) x[c] = x[c] * 0.5f + 0.5f;
      copy_s.push_back(Since(t0));
      t0 = Clock::now();
      kernels::adamw_update(p.data(), g.data(), m.data(), v.data(), static_cast<int64_t>(n),
                            {1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, i + 1});
      adam_s.push_back(Since(t0));
    }
    copy_bw = 2.0 * static_cast<double>(a.size() * sizeof(float)) / Best(copy_s);  // read + write
    bound = copy_bw / 28.0;
    adam = static_cast<double>(n) / Best(adam_s);
  }).join();

  // Push and pull through a ParamServer over loopback gRPC, against raw TCP.
  metrics::Registry registry;
  shardserver::ParamService svc(&registry);
  grpc::ServerBuilder sb;
  int port = 0;
  sb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  sb.SetMaxReceiveMessageSize(16 << 20);
  sb.RegisterService(&svc);
  auto server = sb.BuildAndStart();
  const size_t pn = net_bytes / sizeof(float);
  jobspec::ParamTensor t;
  t.name = "w";
  t.shape = {static_cast<int64_t>(pn)};
  t.numel = pn;
  net::StreamServer::Options data_options;
  data_options.threads = Arg(argc, argv, "--data-threads", data_options.threads);
  auto data = svc.StartDataPort("127.0.0.1", data_options);
  if (!data.ok()) return 1;
  agent::ParamServerClient client("bench", 1, {{"127.0.0.1:" + std::to_string(port), 0, pn, *data}}, {t}, pn, {});
  std::vector<float> params(pn, 0.5f), grads(pn, 0.01f);
  if (!client.Init(params.data(), nullptr, nullptr, 0).ok()) return 1;
  std::vector<double> push_s, pull_s, tcp_s, step_s;
  for (int step = 1; step <= 3; ++step) {
    // The push timed stops 1024 values short of the range, so that it moves bytes only; the
    // rest, pushed after, completes the step and runs AdamW (timed apart).
    const size_t cut = pn - 1024;
    auto t0 = Clock::now();
    if (!client.Push(step, 1e-3, grads.data(), 0, cut).ok()) return 1;
    push_s.push_back(Since(t0));
    t0 = Clock::now();
    if (!client.Push(step, 1e-3, grads.data() + cut, cut, pn).ok()) return 1;
    step_s.push_back(Since(t0));
    t0 = Clock::now();
    if (!client.Pull(params.data()).ok()) return 1;
    pull_s.push_back(Since(t0));
    tcp_s.push_back(RawTcp(net_bytes));
  }
  std::vector<std::pair<int, Concurrent>> concurrent;
  {
    const size_t cbytes = static_cast<size_t>(Arg(argc, argv, "--concurrent-mb", 32)) << 20;
    const int rounds = std::max(1, Arg(argc, argv, "--rounds", 3));
    std::string list = StrArg(argc, argv, "--workers", "1,8,64");
    for (size_t at = 0; at < list.size();) {
      size_t comma = list.find(',', at);
      if (comma == std::string::npos) comma = list.size();
      const int w = std::atoi(list.substr(at, comma - at).c_str());
      if (w < 1) {
        std::fprintf(stderr, "paramserver_bench: --workers wants counts >= 1, got '%s'\n", list.c_str());
        return 2;
      }
      concurrent.emplace_back(w, RunConcurrent("127.0.0.1:" + std::to_string(port), *data, w, cbytes, rounds));
      at = comma + 1;
    }
  }
  server->Shutdown();
  const double gb = static_cast<double>(net_bytes) / 1e9;
  const double tcp = gb / Best(tcp_s), push = gb * (pn - 1024) / pn / Best(push_s), pull = gb / Best(pull_s);

  std::printf("parameter-server mode, best of runs, %d threads (0: all)\n", threads);
  std::printf("AdamW: %.0f M parameters/s; bound %.0f M/s (copy %.2f GB/s read + write / 28 B): %.2fx\n", adam / 1e6,
              bound / 1e6, copy_bw / 1e9, adam / bound);
  std::printf("push %.0f MB: %.3f GB/s; raw TCP %.3f GB/s: %.2fx (then the last 4 KB and the AdamW step they "
              "complete: %.1f ms)\n",
              gb * 1e3, push, tcp, push / tcp, Best(step_s) * 1e3);
  std::printf("pull %.0f MB: %.3f GB/s; raw TCP %.3f GB/s: %.2fx\n", gb * 1e3, pull, tcp, pull / tcp);
  for (const auto& [w, c] : concurrent) {
    std::printf("%2d workers, %zu MB range: push %.3f GB/s, pull %.3f GB/s (all workers' bytes), round %.1f ms; "
                "medians %.3f, %.3f, %.1f ms\n",
                w, static_cast<size_t>(Arg(argc, argv, "--concurrent-mb", 32)), c.push_gbs, c.pull_gbs, c.round_ms,
                c.median_push_gbs, c.median_pull_gbs, c.median_round_ms);
  }
  const bool ok = adam / bound >= 0.6 && push / tcp >= 0.6 && pull / tcp >= 0.6;
  std::printf("targets (AdamW >= 0.6x the bound; push, pull >= 0.6x raw TCP): %s\n", ok ? "met" : "NOT met");
  return 0;
}
