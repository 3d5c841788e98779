// Which BLAS for CPU GEMM: OpenBLAS (OpenMP build) against oneDNN's dnnl_sgemm on the
// shapes of a GPT-2 training step, same thread count, same run.
//   gemm_bench [--threads N] [--tokens BT] [--embd C]
// Prints GFLOP/s of each and the ratio oneDNN / OpenBLAS per shape, and the total time.
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace {

double TimeIt(const std::function<void()>& f) {
  f();  // warm
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, BT = 2048, C = 384;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--tokens")) BT = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--embd")) C = std::atoi(argv[i + 1]);
  }
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  struct Shape {
    const char* what;
    char ta, tb;
    int M, N, K;
  };
  // Forward (NoTrans x NoTrans), dinp (NoTrans x Trans), dweight (Trans x NoTrans).
  const std::vector<Shape> shapes = {
      {"qkv fwd", 'N', 'N', BT, 3 * C, C},   {"fc fwd", 'N', 'N', BT, 4 * C, C},
      {"fcproj fwd", 'N', 'N', BT, C, 4 * C}, {"fc dinp", 'N', 'T', BT, C, 4 * C},
      {"fc dweight", 'T', 'N', C, 4 * C, BT}, {"attn proj fwd", 'N', 'N', BT, C, C},
  };
  std::printf("GEMM, %d threads, BT %d, C %d\n", threads, BT, C);
  std::printf("%-14s %6s %6s %6s %12s %12s %8s\n", "shape", "M", "N", "K", "OpenBLAS", "oneDNN", "ratio");
  double tot_ob = 0, tot_dn = 0;
  for (const Shape& s : shapes) {
    std::vector<float> A(static_cast<size_t>(s.M) * s.K, 0.5f), B(static_cast<size_t>(s.K) * s.N, 0.25f),
        Cm(static_cast<size_t>(s.M) * s.N, 0.f);
    const int lda = s.ta == 'N' ? s.K : s.M;
    const int ldb = s.tb == 'N' ? s.N : s.K;
    const double t_ob = TimeIt([&] {
      cblas_sgemm(CblasRowMajor, s.ta == 'N' ? CblasNoTrans : CblasTrans,
                  s.tb == 'N' ? CblasNoTrans : CblasTrans, s.M, s.N, s.K, 1.f, A.data(), lda,
                  B.data(), ldb, 1.f, Cm.data(), s.N);
    });
    const double t_dn = TimeIt([&] {
      dnnl_sgemm(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, B.data(), ldb, 1.f, Cm.data(), s.N);
    });
    const double flop = 2.0 * s.M * s.N * s.K;
    std::printf("%-14s %6d %6d %6d %9.1f GF %9.1f GF %7.2fx\n", s.what, s.M, s.N, s.K,
                flop / t_ob * 1e-9, flop / t_dn * 1e-9, t_ob / t_dn);
    tot_ob += t_ob;
    tot_dn += t_dn;
  }
  std::printf("%-14s %20s %9.2f ms %9.2f ms %7.2fx  (oneDNN speed / OpenBLAS speed)\n", "total", "",
              tot_ob * 1e3, tot_dn * 1e3, tot_ob / tot_dn);
  return 0;
}
