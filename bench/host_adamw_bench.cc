// The host AdamW of optimizer offload (kernels/cpu/adamw.cc, what ZeroEngine runs on the
// cpu backend for an offloaded shard) against the machine's memory bandwidth, measured in
// the same run by a loop with AdamW's traffic and no arithmetic to speak of: it reads four
// fp32 arrays and writes three, as AdamW reads params, grads, m, v and writes params, m, v
// (28 bytes a parameter). The bound is that loop's bytes/s; AdamW's figure is its
// parameters/s x 28 over it (target >= 0.6).
//   host_adamw_bench [--millions 32] [--threads 2] [--repeats 7]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/buffer.h"
#include "kernels/adamw.h"
#include "kernels/threads.h"

namespace {

// Reads a, b, c, d and writes a, c, d: AdamW's streams, a few adds instead of its math.
void Traffic(float* a, const float* b, float* c, float* d, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float x = a[i] + b[i], y = c[i] + d[i];
    a[i] = x;
    c[i] = y;
    d[i] = x - y;
  }
}

template <typename F>
double Best(int repeats, F&& f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int millions = 32, threads = 2, repeats = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const int v = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--millions")) millions = v;
    else if (!std::strcmp(argv[i], "--threads")) threads = v;
    else if (!std::strcmp(argv[i], "--repeats")) repeats = v;
    else { std::fprintf(stderr, "host_adamw_bench: unknown flag %s\n", argv[i]); return 2; }
  }
  if (millions < 1 || threads < 1 || repeats < 1) {
    std::fprintf(stderr, "host_adamw_bench: --millions, --threads and --repeats must be >= 1\n");
    return 2;
  }
  gantry::kernels::ConfigureThreads(threads);
  const int64_t n = int64_t{millions} << 20;
  gantry::FloatBuffer p(n), g(n), m(n), v(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {  // first touch by the threads that stream them
    p.data()[i] = 0.01f * static_cast<float>(i % 97);
    g.data()[i] = 1e-3f * static_cast<float>(i % 89) - 0.04f;
    m.data()[i] = 0;
    v.data()[i] = 0;
  }
  int step = 0;
  const double t_adamw = Best(repeats, [&] {
    gantry::kernels::adamw_update(p.data(), g.data(), m.data(), v.data(), n,
                                  {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, ++step});
  });
  const double t_bound = Best(repeats, [&] { Traffic(p.data(), g.data(), m.data(), v.data(), n); });
  const double bytes = 28.0 * static_cast<double>(n);
  const double adamw_bw = bytes / t_adamw, bound_bw = bytes / t_bound;
  std::printf("host AdamW, %lld parameters, %d threads, best of %d\n", static_cast<long long>(n), threads, repeats);
  std::printf("%-26s %12s %12s\n", "", "Mparams/s", "GB/s");
  std::printf("%-26s %12.1f %12.2f\n", "AdamW (kernels/cpu)", n / t_adamw / 1e6, adamw_bw / 1e9);
  std::printf("%-26s %12.1f %12.2f\n", "bandwidth bound (28 B/p)", n / t_bound / 1e6, bound_bw / 1e9);
  std::printf("AdamW / bound: %.2f (target >= 0.60)\n", adamw_bw / bound_bw);
  std::printf("{\"adamw_params_per_s\": %.4g, \"bound_params_per_s\": %.4g, \"ratio\": %.4f}\n", n / t_adamw,
              n / t_bound, adamw_bw / bound_bw);
  return 0;
}
