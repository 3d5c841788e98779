// The CPU GEMMs on the shapes of a GPT-2 training step, same thread count, same run:
//  1. fp32, which BLAS (issue 2): OpenBLAS (OpenMP build) against oneDNN's dnnl_sgemm, each
//     threading itself.
//  2. 16-bit inputs, fp32 sums (issue 20): gemm16's chosen path against the fp32 step GEMM
//     Gantry runs today (per-thread slices of single-threaded sgemm, kernels/cpu/matmul.cc),
//     and the candidates measured for the bf16 path: our AVX512_BF16 kernel, the widening
//     path (convert+sgemm), and oneDNN's bf16 matmul primitive (f32 dst) threaded by oneDNN
//     or run as per-thread slices inside our team. Each 16-bit candidate is also run with 1
//     thread and its bits compared ("bits" column): gemm16's contract is a result that does
//     not depend on the thread count.
//   gemm_bench [--threads N] [--tokens BT] [--embd C] [--reps R] [--cpu-time 0|1]
// --cpu-time 1 (with --threads 1) times in the thread's CPU time: one core's rate, steady on
// a machine that other work shares (wall time there counts the other work's time slices).
// Prints GFLOP/s per shape (median of R timed samples of ~30 ms after one warm-up call),
// ratios, and totals.
#include <cblas.h>
#include <immintrin.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm16.h"
#include "kernels/cpu/gemm16_paths.h"

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename();

namespace {

using gantry::kernels::Precision;

int g_reps = 7;

bool g_cpu_time = false;  // --cpu-time: the calling thread's CPU time (1 thread only)

double Now() {
  if (!g_cpu_time) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Seconds per call of f: the median of g_reps samples, each sample as many calls as take
// about 30 ms (so that a sample spans several scheduler ticks of a shared machine).
double TimeIt(const std::function<void()>& f) {
  double t0 = Now();
  f();  // warm
  const double once = Now() - t0;
  const int calls = std::max(1, static_cast<int>(0.03 / std::max(once, 1e-6)));
  std::vector<double> t;
  for (int i = 0; i < g_reps; ++i) {
    t0 = Now();
    for (int c = 0; c < calls; ++c) f();
    t.push_back((Now() - t0) / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Shape {
  const char* what;
  bool ta, tb;
  int M, N, K;
  float beta;  // dweight accumulates
};

// The output split of kernels/cpu/matmul.cc: rows if M >= N, else columns, edges on
// multiples of 16, one block per thread of our team.
void SliceOf(int total, int t, int n, int* i0, int* i1) {
  auto edge = [&](int i) { return i == n ? total : std::min(total, (total * i / n) & ~15); };
  *i0 = edge(t);
  *i1 = edge(t + 1);
}

// C (M,N) = op(A) op(B) + beta C in fp32: per-thread slices of single-threaded OpenBLAS
// sgemm inside one OpenMP team, as the fp32 step does today.
void SgemmSlices(const Shape& s, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  const CBLAS_TRANSPOSE TA = s.ta ? CblasTrans : CblasNoTrans, TB = s.tb ? CblasTrans : CblasNoTrans;
  const bool rows = s.M >= s.N;
#pragma omp parallel
  {
    int i0, i1;
    SliceOf(rows ? s.M : s.N, omp_get_thread_num(), omp_get_num_threads(), &i0, &i1);
    if (i1 > i0 && rows) {
      cblas_sgemm(CblasRowMajor, TA, TB, i1 - i0, s.N, s.K, 1.f, s.ta ? A + i0 : A + int64_t{i0} * lda, lda,
                  B, ldb, s.beta, C + int64_t{i0} * ldc, ldc);
    } else if (i1 > i0) {
      cblas_sgemm(CblasRowMajor, TA, TB, s.M, i1 - i0, s.K, 1.f, A, lda, s.tb ? B + int64_t{i0} * ldb : B + i0,
                  ldb, s.beta, C + i0, ldc);
    }
  }
}

// oneDNN's bf16 matmul (bf16 src and weights, f32 dst; beta as a sum post-op), one
// primitive per (shape, slice), made before timing.
class OnednnBf16 {
 public:
  OnednnBf16() : engine_(dnnl::engine::kind::cpu, 0) {}

  // One primitive over the whole of C, threaded by oneDNN (made for the current
  // omp_get_max_threads()).
  void Whole(const Shape& s, const uint16_t* A, int lda, const uint16_t* B, int ldb, float* C, int ldc) {
    Call& c = Get(s, s.M, s.N, A, lda, B, ldb, C, ldc, "whole");
    dnnl::stream st(engine_);
    c.prim.execute(st, {{DNNL_ARG_SRC, c.a}, {DNNL_ARG_WEIGHTS, c.b}, {DNNL_ARG_DST, c.c}});
    st.wait();
  }

  // One primitive per thread of our team on its slice of C (the split of SgemmSlices).
  void Slices(const Shape& s, const uint16_t* A, int lda, const uint16_t* B, int ldb, float* C, int ldc) {
    const bool rows = s.M >= s.N;
    const int nt = omp_get_max_threads();
    std::vector<Call*> calls(nt, nullptr);
    for (int t = 0; t < nt; ++t) {
      int i0, i1;
      SliceOf(rows ? s.M : s.N, t, nt, &i0, &i1);
      if (i1 <= i0) continue;
      const std::string key = "slice " + std::to_string(t) + "/" + std::to_string(nt);
      if (rows) {
        calls[t] = &Get(s, i1 - i0, s.N, s.ta ? A + i0 : A + int64_t{i0} * lda, lda, B, ldb,
                        C + int64_t{i0} * ldc, ldc, key);
      } else {
        calls[t] = &Get(s, s.M, i1 - i0, A, lda, s.tb ? B + int64_t{i0} * ldb : B + i0, ldb, C + i0, ldc, key);
      }
    }
#pragma omp parallel num_threads(nt)
    {
      Call* c = calls[omp_get_thread_num()];
      if (c != nullptr) {
        dnnl::stream st(engine_);
        c->prim.execute(st, {{DNNL_ARG_SRC, c->a}, {DNNL_ARG_WEIGHTS, c->b}, {DNNL_ARG_DST, c->c}});
        st.wait();
      }
    }
  }

  // The implementation oneDNN chose for s's primitive over the whole of C or over the first
  // thread's slice, at the bench's thread count (e.g. brg:avx512_core_bf16, gemm:jit).
  std::string Impl(const Shape& s, const std::string& part) { return impl_[std::string(s.what) + " " + part]; }

 private:
  struct Call {
    dnnl::matmul prim;
    dnnl::memory a, b, c;
  };
  static dnnl::memory::desc Desc(int rows, int cols, bool trans, int ld, dnnl::memory::data_type dt) {
    return dnnl::memory::desc({rows, cols}, dt, trans ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1});
  }
  Call& Get(const Shape& s, int m, int n, const uint16_t* A, int lda, const uint16_t* B, int ldb, float* C,
            int ldc, const std::string& slice) {
    const std::string key = std::string(s.what) + " " + slice + " " + std::to_string(omp_get_max_threads()) +
                            " " + std::to_string(reinterpret_cast<uintptr_t>(C));
    auto it = calls_.find(key);
    if (it != calls_.end()) return it->second;
    using dt = dnnl::memory::data_type;
    const auto ad = Desc(m, s.K, s.ta, lda, dt::bf16), bd = Desc(s.K, n, s.tb, ldb, dt::bf16),
               cd = Desc(m, n, false, ldc, dt::f32);
    dnnl::primitive_attr attr;
    if (s.beta != 0.f) {
      dnnl::post_ops po;
      po.append_sum(s.beta);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), attr, engine_);
    impl_[std::string(s.what) + " " + (slice == "whole" ? slice : slice.substr(0, slice.find('/')))] =
        pd.impl_info_str();
    Call c{dnnl::matmul(pd), dnnl::memory(ad, engine_, const_cast<uint16_t*>(A)),
           dnnl::memory(bd, engine_, const_cast<uint16_t*>(B)), dnnl::memory(cd, engine_, C)};
    return calls_.emplace(key, std::move(c)).first->second;
  }

  dnnl::engine engine_;
  std::map<std::string, Call> calls_;
  std::map<std::string, std::string> impl_;
};

uint16_t Bf16Bits(float x) { return gantry::kernels::Bf16Of(x); }

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, BT = 2048, C = 384;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--tokens")) BT = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--embd")) C = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) g_reps = std::max(1, std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--cpu-time")) g_cpu_time = std::atoi(argv[i + 1]) != 0;
  }
  if (g_cpu_time && threads != 1) {
    std::fprintf(stderr, "gemm_bench: --cpu-time 1 times the calling thread, so it needs --threads 1\n");
    return 2;
  }
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  std::printf("OpenBLAS kernel %s (OPENBLAS_CORETYPE %s), %d threads, BT %d, C %d, median of %d samples, %s\n",
              openblas_get_corename(), coretype ? coretype : "unset", threads, BT, C, g_reps,
              g_cpu_time ? "thread CPU time" : "wall time");

  // Part 1: the fp32 library comparison of issue 2 (each library threading itself).
  {
    struct Old {
      const char* what;
      char ta, tb;
      int M, N, K;
    };
    const std::vector<Old> shapes = {
        {"qkv fwd", 'N', 'N', BT, 3 * C, C},   {"fc fwd", 'N', 'N', BT, 4 * C, C},
        {"fcproj fwd", 'N', 'N', BT, C, 4 * C}, {"fc dinp", 'N', 'T', BT, C, 4 * C},
        {"fc dweight", 'T', 'N', C, 4 * C, BT}, {"attn proj fwd", 'N', 'N', BT, C, C},
    };
    std::printf("\nfp32 GEMM, each library threading itself\n");
    std::printf("%-14s %6s %6s %6s %12s %12s %8s\n", "shape", "M", "N", "K", "OpenBLAS", "oneDNN", "ratio");
    double tot_ob = 0, tot_dn = 0;
    for (const Old& s : shapes) {
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
  }

  // Part 2: 16-bit inputs, fp32 sums. One GPT-2 layer's GEMMs (Conv1D layout, weight (C,OC)):
  // forward out = inp @ W (NN), dinp = dout @ W^T (NT), dweight += inp^T @ dout (TN).
  const std::vector<Shape> shapes = {
      {"qkv fwd", false, false, BT, 3 * C, C, 0.f},        {"qkv dinp", false, true, BT, C, 3 * C, 0.f},
      {"qkv dweight", true, false, C, 3 * C, BT, 1.f},     {"attproj fwd", false, false, BT, C, C, 0.f},
      {"attproj dinp", false, true, BT, C, C, 0.f},        {"attproj dweight", true, false, C, C, BT, 1.f},
      {"fc fwd", false, false, BT, 4 * C, C, 0.f},         {"fc dinp", false, true, BT, C, 4 * C, 0.f},
      {"fc dweight", true, false, C, 4 * C, BT, 1.f},      {"fcproj fwd", false, false, BT, C, 4 * C, 0.f},
      {"fcproj dinp", false, true, BT, 4 * C, C, 0.f},     {"fcproj dweight", true, false, 4 * C, C, BT, 1.f},
  };
  const bool native = gantry::kernels::gemm16_native_supported(Precision::kBf16);
  std::printf("\n16-bit GEMM, fp32 sums, %d threads; gemm16 path: bf16 \"%s\", fp16 \"%s\"\n", threads,
              gantry::kernels::gemm16_path(Precision::kBf16), gantry::kernels::gemm16_path(Precision::kFp16));
  if (!native) {
    std::printf("own avx512_bf16: not run (%s)\n",
                gantry::kernels::gemm16_native_unsupported_reason(Precision::kBf16));
  }
  std::printf("GFLOP/s; sgemm = fp32 per-thread sgemm slices (today's fp32 step); "
              "bits = same bits with 1 thread\n");
  std::printf("%-15s %5s %5s %5s | %7s | %7s %7s %7s %7s %7s %7s | %6s %6s | %s\n", "shape", "M", "N", "K",
              "sgemm", "gemm16", "own", "conv", "conv16", "dnnl", "dnnlsl", "g16/sg", "g16/dn",
              "bits sg/own/conv/dnnl/dnnlsl, oneDNN impl whole|slice 0");
  std::mt19937 rng(20);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  OnednnBf16 onednn;
  enum { kSgemm, kGemm16, kOwn, kConv, kConv16, kDnnl, kDnnlSlices, kNum };
  double total[kNum] = {};
  for (const Shape& s : shapes) {
    const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N, ldc = s.N;
    const size_t na = static_cast<size_t>(s.M) * s.K, nb = static_cast<size_t>(s.K) * s.N;
    std::vector<uint16_t> A(na), B(nb), A16(na), B16(nb);
    std::vector<float> Af(na), Bf(nb);
    for (size_t i = 0; i < na; ++i) {
      A[i] = Bf16Bits(uni(rng));
      Af[i] = gantry::kernels::FloatOfBf16(A[i]);
      A16[i] = _cvtss_sh(Af[i], 0);
    }
    for (size_t i = 0; i < nb; ++i) {
      B[i] = Bf16Bits(uni(rng));
      Bf[i] = gantry::kernels::FloatOfBf16(B[i]);
      B16[i] = _cvtss_sh(Bf[i], 0);
    }
    std::vector<float> C0(static_cast<size_t>(s.M) * ldc);
    for (float& x : C0) x = uni(rng);
    std::vector<float> Cm = C0;
    auto run = [&](int which) {
      switch (which) {
        case kSgemm:
          SgemmSlices(s, Af.data(), lda, Bf.data(), ldb, Cm.data(), ldc);
          break;
        case kGemm16:
          gantry::kernels::gemm16(s.ta, s.tb, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, s.beta,
                                  Cm.data(), ldc, Precision::kBf16);
          break;
        case kOwn:
          gantry::kernels::gemm16_native(s.ta, s.tb, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, s.beta,
                                         Cm.data(), ldc, Precision::kBf16);
          break;
        case kConv:
          gantry::kernels::gemm16_convert(s.ta, s.tb, s.M, s.N, s.K, A.data(), lda, B.data(), ldb, s.beta,
                                          Cm.data(), ldc, Precision::kBf16);
          break;
        case kConv16:
          gantry::kernels::gemm16_convert(s.ta, s.tb, s.M, s.N, s.K, A16.data(), lda, B16.data(), ldb, s.beta,
                                          Cm.data(), ldc, Precision::kFp16);
          break;
        case kDnnl:
          onednn.Whole(s, A.data(), lda, B.data(), ldb, Cm.data(), ldc);
          break;
        case kDnnlSlices:
          onednn.Slices(s, A.data(), lda, B.data(), ldb, Cm.data(), ldc);
          break;
      }
    };
    double t[kNum] = {};
    const char* bits[kNum] = {};
    for (int w = 0; w < kNum; ++w) {
      if (w == kOwn && !native) continue;
      // The bits check: one run from C0 with 1 thread, one with `threads`.
      bits[w] = "-";
      if (threads > 1) {
        std::vector<float> one;
        omp_set_num_threads(1);
        Cm = C0;
        run(w);
        one = Cm;
        omp_set_num_threads(threads);
        Cm = C0;
        run(w);
        bits[w] = std::memcmp(one.data(), Cm.data(), one.size() * sizeof(float)) == 0 ? "same" : "DIFF";
      }
      t[w] = TimeIt([&] { run(w); });
      total[w] += t[w];
    }
    const double gf = 2.0 * s.M * s.N * s.K * 1e-9;
    auto rate = [&](int w) { return t[w] > 0 ? gf / t[w] : 0.0; };
    std::printf("%-15s %5d %5d %5d | %7.1f | %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f | %5.2fx %5.2fx | "
                "%s/%s/%s/%s/%s  %s|%s\n",
                s.what, s.M, s.N, s.K, rate(kSgemm), rate(kGemm16), rate(kOwn), rate(kConv), rate(kConv16),
                rate(kDnnl), rate(kDnnlSlices), t[kSgemm] / t[kGemm16], t[kDnnl] / t[kGemm16],
                bits[kSgemm], native ? bits[kOwn] : "-", bits[kConv], bits[kDnnl], bits[kDnnlSlices],
                onednn.Impl(s, "whole").c_str(), onednn.Impl(s, "slice 0").c_str());
  }
  std::printf("%-33s | %7.2f | %7.2f %7.2f %7.2f %7.2f %7.2f %7.2f | %5.2fx %5.2fx   (total ms)\n", "total",
              total[kSgemm] * 1e3, total[kGemm16] * 1e3, total[kOwn] * 1e3, total[kConv] * 1e3,
              total[kConv16] * 1e3, total[kDnnl] * 1e3,
              total[kDnnlSlices] * 1e3, total[kSgemm] / total[kGemm16], total[kDnnl] / total[kGemm16]);
  return 0;
}
