// The residual add fused with the norm after it (Backend::ResidualLayerNormForward and
// ResidualRMSNormForward) against the two ops it replaces (ResidualForward, then
// LayerNormForward or RMSNormForward), on the cpu backend and on the backend under test
// (cuda-emulated here; cuda as cuda_residual_norm_test on a GPU host).
//
// What must hold, on each backend:
// - the fused op gives the two calls' bits: the residual sum, the normalised output (fp32, bf16
//   or fp16) and the statistics. The model swaps one for the other (and recomputes activations
//   with the unfused norm), so nothing less than equality will do;
// - the CUDA kernel's 16-byte path (C a multiple of 8, rows 16-byte aligned) and its scalar path
//   (tensors placed one float off a 16-byte boundary) give the same bits: a lane sums the same
//   columns in the same order either way;
// - across backends the fp32 results agree within 1e-5 relative (the order of the row sums
//   differs: an fp32 reordering of at most C terms, as backend_ops_test's LayerNorm bound);
// - residual may be a (the residual stream updated in place).
// Outputs start as NaN (16-bit: 0xffff, a NaN in both types), so an element no thread writes fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/backend.h"
#include "tests/kernels/backend_arena.h"
#include "tests/test_util.h"

namespace gantry::kernels {
namespace {

using testing::RandomNormal;
using testing::RelErr;
constexpr double kTol = 1e-5;
constexpr float kEps = 1e-5f;  // RMSNorm's (Llama's configs use 1e-5 or 1e-6)

// Shapes: N 1 and a row per warp up to several blocks of 8 rows; C 1, not a multiple of 4 or 8
// (33, 257, 1025: the scalar path), a multiple of 4 but not 8 (100, 12), of 8 (768, 64, 1024:
// the 16-byte path) and more than 256 columns a lane round (1025, 768).
const std::vector<std::tuple<int, int>> kShapes = {{1, 1},   {1, 768},  {7, 33},    {16, 100}, {9, 12},
                                                   {18, 257}, {3, 1025}, {33, 64}, {17, 768}, {2, 1024}};

// One norm's forward, as its outputs: the residual, the output's bytes (fp32 or 16-bit), the
// statistics (LayerNorm: mean, rstd; RMSNorm: rstd).
struct Result {
  std::vector<float> residual;
  std::vector<uint16_t> out16;
  std::vector<float> out32, mean, rstd;
};

enum class Norm { kLayerNorm, kRMSNorm };
const char* NormName(Norm n) { return n == Norm::kLayerNorm ? "LayerNorm" : "RMSNorm"; }

// Runs the norm on be over a (N,C) + b (N,C): fused (one op) or as the two ops, its output of
// precision p, every tensor placed `shift` floats off alignment; in_place: the residual written
// over a.
Result RunNorm(Backend& be, Norm norm, bool fused, Precision p, int N, int C, int shift, bool in_place) {
  const size_t n = static_cast<size_t>(N) * C;
  const auto a = RandomNormal(n, 1, 2.f), b = RandomNormal(n, 2), w = RandomNormal(C, 3), bias = RandomNormal(C, 4);
  Arena mem(be, 8 * n * sizeof(float) + 4 * static_cast<size_t>(C + N) * sizeof(float) + 1024);
  float* da = mem.Put(a, shift);
  const float* db = mem.Put(b, shift);
  const float* dw = mem.Put(w, shift);
  const float* dbias = mem.Put(bias, shift);
  float* res = in_place ? da : mem.Poisoned<float>(n, shift);
  void* out = p == Precision::kFp32 ? static_cast<void*>(mem.Poisoned<float>(n, shift))
                                    : static_cast<void*>(mem.Poisoned<uint16_t>(n, shift));
  float* mean = mem.Poisoned<float>(N, shift);
  float* rstd = mem.Poisoned<float>(N, shift);
  const Ptr o(out, p);
  if (fused && norm == Norm::kLayerNorm) {
    be.ResidualLayerNormForward(res, o, mean, rstd, da, db, dw, dbias, N, C);
  } else if (fused) {
    be.ResidualRMSNormForward(res, o, rstd, da, db, dw, N, C, kEps);
  } else {
    be.ResidualForward(res, da, db, static_cast<int64_t>(n));
    if (norm == Norm::kLayerNorm) {
      be.LayerNormForward(o, mean, rstd, res, dw, dbias, N, C);
    } else {
      be.RMSNormForward(o, rstd, res, dw, N, C, kEps);
    }
  }
  const absl::Status s = be.Synchronize();
  EXPECT_TRUE(s.ok()) << s;
  Result r;
  r.residual = mem.Get(static_cast<const float*>(res), n);
  if (p == Precision::kFp32) {
    r.out32 = mem.Get(static_cast<const float*>(out), n);
  } else {
    r.out16 = mem.Get(static_cast<const uint16_t*>(out), n);
  }
  if (norm == Norm::kLayerNorm) r.mean = mem.Get(static_cast<const float*>(mean), N);
  r.rstd = mem.Get(static_cast<const float*>(rstd), N);
  return r;
}

void ExpectSameBits(const Result& got, const Result& want) {
  EXPECT_TRUE(SameBits(got.residual, want.residual)) << "residual";
  EXPECT_TRUE(SameBits(got.out32, want.out32)) << "fp32 output";
  EXPECT_TRUE(SameBits(got.out16, want.out16)) << "16-bit output";
  EXPECT_TRUE(SameBits(got.mean, want.mean)) << "mean";
  EXPECT_TRUE(SameBits(got.rstd, want.rstd)) << "rstd";
}

// Runs on the cpu backend and on the backend under test (backend_arena.h).
using ResidualNormTest = BackendParamTest;

TEST_P(ResidualNormTest, TheFusedOpGivesTheTwoOpsBits) {
  for (Norm norm : {Norm::kLayerNorm, Norm::kRMSNorm}) {
    for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
      for (auto [N, C] : kShapes) {
        SCOPED_TRACE(::testing::Message() << NormName(norm) << " " << PrecisionName(p) << " " << N << "x" << C);
        const Result two = RunNorm(be(), norm, false, p, N, C, 0, false);
        ExpectSameBits(RunNorm(be(), norm, true, p, N, C, 0, false), two);
        // Misaligned (the CUDA kernel's scalar loads and stores) and in place: the same bits.
        ExpectSameBits(RunNorm(be(), norm, true, p, N, C, 1, false), two);
        ExpectSameBits(RunNorm(be(), norm, true, p, N, C, 0, true), two);
        ExpectSameBits(RunNorm(be(), norm, false, p, N, C, 1, false), two);
      }
    }
  }
}

TEST_P(ResidualNormTest, MatchesTheCpuBackend) {
  for (Norm norm : {Norm::kLayerNorm, Norm::kRMSNorm}) {
    for (Precision p : {Precision::kFp32, Precision::kBf16}) {
      for (auto [N, C] : kShapes) {
        SCOPED_TRACE(::testing::Message() << NormName(norm) << " " << PrecisionName(p) << " " << N << "x" << C);
        const Result got = RunNorm(be(), norm, true, p, N, C, 0, false);
        const Result want = RunNorm(CpuBackend(), norm, true, p, N, C, 0, false);
        // The residual is one fp32 add an element: every backend's bits.
        EXPECT_TRUE(SameBits(got.residual, want.residual));
        if (norm == Norm::kLayerNorm) {
          EXPECT_LE(RelErr(got.mean, want.mean), kTol);
        }
        EXPECT_LE(RelErr(got.rstd, want.rstd), kTol);
        if (p == Precision::kFp32) {
          EXPECT_LE(RelErr(got.out32, want.out32), kTol);
          continue;
        }
        // 16-bit: the fp32 values differ by at most kTol of the largest (the statistics' sums in
        // another order), so the rounded ones by that plus one bf16 ulp of the value (2^-7
        // relative at most, as a value may round either side of a tie point).
        const Result ref32 = RunNorm(CpuBackend(), norm, true, Precision::kFp32, N, C, 0, false);
        double top = 0;
        for (float v : ref32.out32) top = std::max(top, std::fabs(static_cast<double>(v)));
        for (size_t i = 0; i < got.out16.size(); ++i) {
          const double g = FloatOf16(got.out16[i], p), w = FloatOf16(want.out16[i], p);
          ASSERT_LE(std::fabs(g - w), kTol * top + std::ldexp(std::fabs(w), -7)) << "element " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ResidualNormTest, ::testing::Values(std::string("cpu"), GANTRY_TEST_BACKEND),
                         BackendParamName);

}  // namespace
}  // namespace gantry::kernels
