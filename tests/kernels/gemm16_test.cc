// gemm16 (kernels/cpu/gemm16.h): both paths against a float64 reference over the exact fp32
// values of the 16-bit inputs, against each other, and the same bits at any thread count.
#include "kernels/cpu/gemm16.h"

#include <gtest/gtest.h>
#include <immintrin.h>
#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/gemm16_paths.h"

namespace gantry::kernels {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // fp32's unit roundoff, 2^-24

// The 16-bit bits of x (already representable) and back.
uint16_t Bits(float x, Precision t) {
  return t == Precision::kBf16 ? Bf16Of(x) : _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
}
float Value(uint16_t b, Precision t) { return t == Precision::kBf16 ? FloatOfBf16(b) : _cvtsh_ss(b); }
const char* Name(Precision t) { return t == Precision::kBf16 ? "bf16" : "fp16"; }

// kConvertChunked: the convert path with its widened room made small (1024 floats), so that K
// is cut into chunks of 16 whose products add up in C.
enum class Path { kNative, kConvert, kConvertChunked, kDispatch };

// One GEMM problem with padded strides: the padding of A and B holds NaNs and that of C a
// sentinel, so a read past an operand's edge poisons the result and a write past C's shows.
struct Problem {
  bool ta, tb;
  int M, N, K;
  float beta;
  Precision t;
  int lda, ldb, ldc;
  std::vector<uint16_t> A, B;
  std::vector<float> C0;       // C before the call (NaN where beta is 0: it must not be read)
  std::vector<double> ref;     // beta C0 + op(A) op(B), in float64 (exact products)
  std::vector<double> bound;   // the error an fp32 sum may have: (K + 2) u (|beta C0| + sum |a b|)

  static constexpr float kSentinel = -12345.f;

  Problem(bool ta_, bool tb_, int M_, int N_, int K_, float beta_, Precision t_, uint32_t seed)
      : ta(ta_), tb(tb_), M(M_), N(N_), K(K_), beta(beta_), t(t_) {
    lda = (ta ? M : K) + 5;
    ldb = (tb ? K : N) + 3;
    ldc = N + 7;
    const int a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    const uint16_t nan16 = t == Precision::kBf16 ? 0x7fc0 : 0x7e00;
    A.assign(static_cast<size_t>(a_rows) * lda, nan16);
    B.assign(static_cast<size_t>(b_rows) * ldb, nan16);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.f, 1.f);
    auto rounded = [&] {
      const float x = uni(rng);
      return Bits(t == Precision::kBf16 ? RoundToBf16(x) : RoundToFp16(x), t);
    };
    for (int r = 0; r < a_rows; ++r) {
      for (int c = 0; c < a_cols; ++c) A[static_cast<size_t>(r) * lda + c] = rounded();
    }
    for (int r = 0; r < b_rows; ++r) {
      for (int c = 0; c < b_cols; ++c) B[static_cast<size_t>(r) * ldb + c] = rounded();
    }
    C0.assign(static_cast<size_t>(M) * ldc, kSentinel);
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n) {
        C0[static_cast<size_t>(m) * ldc + n] = beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : uni(rng);
      }
    }
    ref.assign(static_cast<size_t>(M) * N, 0.0);
    bound.assign(static_cast<size_t>(M) * N, 0.0);
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n) {
        double s = 0, mag = 0;
        if (beta != 0.f) {
          s = static_cast<double>(beta) * C0[static_cast<size_t>(m) * ldc + n];
          mag = std::fabs(s);
        }
        for (int k = 0; k < K; ++k) {
          const size_t ia = ta ? static_cast<size_t>(k) * lda + m : static_cast<size_t>(m) * lda + k;
          const size_t ib = tb ? static_cast<size_t>(n) * ldb + k : static_cast<size_t>(k) * ldb + n;
          const double a = Value(A[ia], t), b = Value(B[ib], t);
          s += a * b;  // exact: a 16-bit significand times another fits fp32's, and float64's
          mag += std::fabs(a * b);
        }
        ref[static_cast<size_t>(m) * N + n] = s;
        // Summing n fp32 terms in any order errs by at most (n - 1) u (1 + O(u)) times the sum
        // of their magnitudes (Higham, Accuracy and Stability, 3.1). Here n = K + 1: K exact
        // products and beta C0, itself rounded once; (K + 2) u covers both. Products being
        // exact, this is the whole error of either path.
        bound[static_cast<size_t>(m) * N + n] = (K + 2) * kU * mag;
      }
    }
  }

  std::string Describe() const {
    return std::string(Name(t)) + " ta " + std::to_string(ta) + " tb " + std::to_string(tb) + " " +
           std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
           " beta " + std::to_string(beta);
  }

  // Runs the path from C0 and returns C (with its padding). rows_seen counts how often
  // `after` covered each row; snapshot holds the rows as they were when `after` saw them.
  std::vector<float> Run(Path path, std::vector<int>* rows_seen = nullptr,
                         std::vector<float>* snapshot = nullptr) const {
    std::vector<float> C = C0;
    std::vector<std::atomic<int>> seen(M);
    std::vector<float> snap(C.size(), 0.f);
    auto after = [&](int r0, int r1) {
      ASSERT_LE(0, r0);
      ASSERT_LE(r0, r1);
      ASSERT_LE(r1, M);
      for (int r = r0; r < r1; ++r) {
        seen[r].fetch_add(1);
        std::memcpy(&snap[static_cast<size_t>(r) * ldc], &C[static_cast<size_t>(r) * ldc], N * sizeof(float));
      }
    };
    switch (path) {
      case Path::kNative:
        gemm16_native(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, t, after);
        break;
      case Path::kConvert:
        gemm16_convert(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, t, after);
        break;
      case Path::kConvertChunked:
        gemm16_convert(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, t, after, 1024);
        break;
      case Path::kDispatch:
        gemm16(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), ldc, t, after);
        break;
    }
    if (rows_seen != nullptr) {
      rows_seen->resize(M);
      for (int r = 0; r < M; ++r) (*rows_seen)[r] = seen[r].load();
    }
    if (snapshot != nullptr) *snapshot = std::move(snap);
    return C;
  }

  // Checks C against the reference within the bound, C's padding untouched, `after` having
  // covered every row once with its final values.
  void Check(const std::vector<float>& C, const std::vector<int>& rows_seen, const std::vector<float>& snapshot,
             const std::string& what) const {
    int bad = 0;
    for (int m = 0; m < M && bad < 5; ++m) {
      EXPECT_EQ(rows_seen[m], 1) << what << " row " << m << " given to after() " << rows_seen[m] << " times";
      for (int n = 0; n < N; ++n) {
        const size_t i = static_cast<size_t>(m) * ldc + n;
        const double err = std::fabs(C[i] - ref[static_cast<size_t>(m) * N + n]);
        // |C - exact| <= (K + 2) 2^-24 (|beta C0| + sum_k |a_k b_k|): fp32 summation in any order.
        if (!(err <= bound[static_cast<size_t>(m) * N + n])) {
          ADD_FAILURE() << what << " C[" << m << "," << n << "] = " << C[i] << ", exact "
                        << ref[static_cast<size_t>(m) * N + n] << ", error " << err << " > bound "
                        << bound[static_cast<size_t>(m) * N + n];
          ++bad;
        }
        if (std::memcmp(&snapshot[i], &C[i], sizeof(float)) != 0 && bad < 5) {
          ADD_FAILURE() << what << " C[" << m << "," << n << "] changed after after() saw it";
          ++bad;
        }
      }
      for (int n = N; n < ldc; ++n) {
        EXPECT_EQ(C[static_cast<size_t>(m) * ldc + n], kSentinel) << what << " wrote C's padding at row " << m;
      }
    }
  }
};

struct Dims {
  int M, N, K;
};
// Odd shapes (edge tiles in every direction; N > M takes the column split), K over one block
// of the native kernel (384) and odd, and shapes big enough to be threaded.
const Dims kShapes[] = {{37, 53, 29}, {300, 200, 150}, {45, 400, 517}, {1000, 130, 300}, {1, 1, 1}, {8, 48, 2}};

// Runs every shape, transpose pair and beta through `body`.
template <typename F>
void ForEachProblem(Precision t, F&& body) {
  uint32_t seed = 1;
  for (const Dims& d : kShapes) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (float beta : {0.f, 1.f, 0.5f}) {
          const Problem p(ta, tb, d.M, d.N, d.K, beta, t, seed++);
          body(p);
        }
      }
    }
  }
}

// Restores the OpenMP thread count a test changes.
class ThreadsGuard {
 public:
  ThreadsGuard() : saved_(omp_get_max_threads()) {}
  ~ThreadsGuard() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

void CheckPath(Path path, Precision t) {
  ForEachProblem(t, [&](const Problem& p) {
    std::vector<int> seen;
    std::vector<float> snap;
    const std::vector<float> C = p.Run(path, &seen, &snap);
    p.Check(C, seen, snap, p.Describe());
  });
}

void CheckThreadCounts(Path path, Precision t) {
  ThreadsGuard guard;
  ForEachProblem(t, [&](const Problem& p) {
    omp_set_num_threads(1);
    const std::vector<float> one = p.Run(path);
    for (int nt : {2, 3}) {
      omp_set_num_threads(nt);
      const std::vector<float> many = p.Run(path);
      EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0)
          << p.Describe() << ": different bits with 1 and " << nt << " threads";
    }
  });
}

TEST(Gemm16Test, ConvertPathWithinFp32SummationOfExact) {
  CheckPath(Path::kConvert, Precision::kBf16);
  CheckPath(Path::kConvert, Precision::kFp16);
  CheckPath(Path::kConvertChunked, Precision::kBf16);
  CheckPath(Path::kConvertChunked, Precision::kFp16);
}

TEST(Gemm16Test, NativePathWithinFp32SummationOfExact) {
  if (!gemm16_native_supported(Precision::kBf16)) {
    GTEST_SKIP() << "native bf16 path not checked: " << gemm16_native_unsupported_reason(Precision::kBf16);
  }
  CheckPath(Path::kNative, Precision::kBf16);
}

TEST(Gemm16Test, NativeAndConvertAgree) {
  if (!gemm16_native_supported(Precision::kBf16)) {
    GTEST_SKIP() << "native bf16 path not checked: " << gemm16_native_unsupported_reason(Precision::kBf16);
  }
  ForEachProblem(Precision::kBf16, [&](const Problem& p) {
    const std::vector<float> a = p.Run(Path::kNative), b = p.Run(Path::kConvert);
    for (int m = 0; m < p.M; ++m) {
      for (int n = 0; n < p.N; ++n) {
        const size_t i = static_cast<size_t>(m) * p.ldc + n;
        // Each is within the bound of the exact sum, so they are within twice it of each other.
        ASSERT_LE(std::fabs(static_cast<double>(a[i]) - b[i]), 2 * p.bound[static_cast<size_t>(m) * p.N + n])
            << p.Describe() << " at " << m << "," << n;
      }
    }
  });
}

TEST(Gemm16Test, ConvertPathSameBitsAtAnyThreadCount) {
  CheckThreadCounts(Path::kConvert, Precision::kBf16);
  CheckThreadCounts(Path::kConvert, Precision::kFp16);
  CheckThreadCounts(Path::kConvertChunked, Precision::kBf16);
}

TEST(Gemm16Test, NativePathSameBitsAtAnyThreadCount) {
  if (!gemm16_native_supported(Precision::kBf16)) {
    GTEST_SKIP() << "native bf16 path not checked: " << gemm16_native_unsupported_reason(Precision::kBf16);
  }
  CheckThreadCounts(Path::kNative, Precision::kBf16);
}

// VDPBF16PS treats subnormal bf16 inputs as 0 (gemm16_paths.h says so; this pins it): a
// subnormal times 1 gives 0 on the native path and the exact value when widened.
TEST(Gemm16Test, NativePathFlushesSubnormalInputs) {
  if (!gemm16_native_supported(Precision::kBf16)) {
    GTEST_SKIP() << "native bf16 path not checked: " << gemm16_native_unsupported_reason(Precision::kBf16);
  }
  const uint16_t tiny = 0x0001;  // 2^-133, bf16's smallest subnormal
  const uint16_t one = Bf16Of(1.f);
  float native = -1.f, widened = -1.f;
  gemm16_native(false, false, 1, 1, 1, &tiny, 1, &one, 1, 0.f, &native, 1, Precision::kBf16);
  gemm16_convert(false, false, 1, 1, 1, &tiny, 1, &one, 1, 0.f, &widened, 1, Precision::kBf16);
  EXPECT_EQ(native, 0.f);
  EXPECT_EQ(widened, FloatOfBf16(tiny));
}

// gemm16 takes the native path for bf16 where the CPU has it unless GANTRY_GEMM16=convert,
// and the widening path for fp16 always; its bits are that path's. (CTest runs this test
// also with GANTRY_GEMM16=convert: tests/CMakeLists.txt.)
TEST(Gemm16Dispatch, FollowsCpuAndEnvironment) {
  const char* env = std::getenv("GANTRY_GEMM16");
  const bool forced = env != nullptr && std::string(env) == "convert";
  const bool native = !forced && gemm16_native_supported(Precision::kBf16);
  EXPECT_STREQ(gemm16_path(Precision::kBf16), native ? "own avx512_bf16" : "convert+sgemm");
  EXPECT_STREQ(gemm16_path(Precision::kFp16), "convert+sgemm");
  for (Precision t : {Precision::kBf16, Precision::kFp16}) {
    const Problem p(false, true, 300, 200, 150, 1.f, t, 7);
    const Path expected = t == Precision::kBf16 && native ? Path::kNative : Path::kConvert;
    const std::vector<float> got = p.Run(Path::kDispatch), want = p.Run(expected);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << Name(t);
  }
}

TEST(Gemm16Test, EmptyAndZeroKShapes) {
  for (Path path : {Path::kConvert, Path::kNative}) {
    if (path == Path::kNative && !gemm16_native_supported(Precision::kBf16)) continue;
    // K = 0: C = beta C (beta 0: zeros, whatever C held), after() still covers the rows.
    for (float beta : {0.f, 2.f}) {
      const Problem p(false, false, 5, 6, 0, beta, Precision::kBf16, 3);
      std::vector<int> seen;
      std::vector<float> snap;
      const std::vector<float> C = p.Run(path, &seen, &snap);
      p.Check(C, seen, snap, "K = 0 beta " + std::to_string(beta));
    }
    // M = 0 or N = 0: nothing to compute, nothing written.
    float c = 3.f;
    const uint16_t x = Bf16Of(1.f);
    int calls = 0;
    auto count = [&](int, int) { ++calls; };
    if (path == Path::kNative) {
      gemm16_native(false, false, 0, 1, 1, &x, 1, &x, 1, 0.f, &c, 1, Precision::kBf16, count);
      gemm16_native(false, false, 1, 0, 1, &x, 1, &x, 1, 0.f, &c, 1, Precision::kBf16, count);
    } else {
      gemm16_convert(false, false, 0, 1, 1, &x, 1, &x, 1, 0.f, &c, 1, Precision::kBf16, count);
      gemm16_convert(false, false, 1, 0, 1, &x, 1, &x, 1, 0.f, &c, 1, Precision::kBf16, count);
    }
    EXPECT_EQ(c, 3.f);
    EXPECT_EQ(calls, 1);  // the N = 0 call's one row
  }
}

}  // namespace
}  // namespace gantry::kernels
