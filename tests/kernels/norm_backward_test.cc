// The norms' backward (Backend::LayerNormBackward and RMSNormBackward) on the backend under test
// (cuda-emulated here; cuda as cuda_norm_backward_test on a GPU host) against the cpu backend.
// On the cuda kinds both run in one pass for C up to 1024 (kernels/cuda/norm_backward.cuh): a
// warp a row, the rows split into blocks, each block's dweight (and dbias) partial sums added up
// by a second kernel in block order; C over 1024 takes the two passes.
//
// What must hold, on each backend:
// - dinp, dweight (and dbias) accumulated onto nonzero values agree with the cpu backend's within
//   1e-5 relative (backend_ops_test's fp32 bound: a row's sums and a column's sums in another
//   order; measured here at most 2.4e-6 over these shapes,
//   dbias over 8200 rows);
// - the CUDA kernel's 16-byte path (C a multiple of 4, rows 16-byte aligned) and its scalar path
//   (every tensor one float off a 16-byte boundary) give the same bits: a lane loads the same
//   columns and sums them in the same order either way;
// - two runs give the same bits (fixed-order sums, no atomics).
// - a 16-bit dout (bf16, fp16) gives what its values in fp32 give, and the 16-bit copy of the
//   input gradient (dinp16) is exactly Convert of the op's dinp: the one-pass kernel and the two
//   passes alike, aligned or not (the mixed-precision backward's fused casts,
//   TensorParallel::CastsFused). On the cpu the same bits (one code reads either dout); on the cuda
//   kinds the kernel for 16-bit loads is another instantiation, whose multiply-adds the compiler
//   may fuse otherwise (measured: LayerNorm's one-pass dinp an ulp apart at some elements in
//   cuda-emulated), so within the fp32 bound above, the parameter gradients (summed in the same
//   order) the same bits there too.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/backend.h"
#include "tests/kernels/backend_arena.h"
#include "tests/test_util.h"

namespace gantry::kernels {
namespace {

using testing::RandomNormal;
using testing::RelErr;
constexpr double kTol = 1e-5;
constexpr float kEps = 1e-5f;

// Shapes (N, C): N 1; a block's rows not a multiple of its 8 warps; several blocks, the last one
// short (2051: 257 blocks of 8, the last of 3; 8200: the 1024-block cap, 912 blocks of 9, the
// last of 7); C 1, not a multiple of 4 (33, 257, 1023: the scalar path), of 4 but not 8 (12,
// 100), of 128 (768: the Llama's width, 1024: the widest one-pass C), and over 1024 (1025,
// 2048: the two passes).
const std::vector<std::tuple<int, int>> kShapes = {{1, 1},    {1, 768},  {7, 33},    {13, 100}, {18, 257},
                                                   {2051, 12}, {8200, 8}, {300, 768}, {9, 1024}, {5, 1023},
                                                   {3, 1025},  {2, 2048}};

enum class Norm { kLayerNorm, kRMSNorm };
const char* NormName(Norm n) { return n == Norm::kLayerNorm ? "LayerNorm" : "RMSNorm"; }

struct Grads {
  std::vector<float> dinp, dweight, dbias;
};

// The norm's forward then backward on be over random (N,C) inputs, the gradients accumulated
// onto random values, every tensor placed `shift` floats off alignment.
Grads RunBackward(Backend& be, Norm norm, int N, int C, int shift) {
  const size_t n = static_cast<size_t>(N) * C;
  const auto x = RandomNormal(n, 1, 2.f), w = RandomNormal(C, 2), bias = RandomNormal(C, 3),
             dout = RandomNormal(n, 4), dinp0 = RandomNormal(n, 5), dw0 = RandomNormal(C, 6),
             db0 = RandomNormal(C, 7);
  Arena mem(be, 4 * n * sizeof(float) + 8 * static_cast<size_t>(C + N) * sizeof(float) + 1024);
  const float* ex = mem.Put(x, shift);
  const float* ew = mem.Put(w, shift);
  const float* ebias = mem.Put(bias, shift);
  const float* edout = mem.Put(dout, shift);
  float* edinp = mem.Put(dinp0, shift);
  float* edw = mem.Put(dw0, shift);
  float* edb = mem.Put(db0, shift);
  float* out = mem.Poisoned<float>(n, shift);
  float* mean = mem.Poisoned<float>(N, shift);
  float* rstd = mem.Poisoned<float>(N, shift);
  if (norm == Norm::kLayerNorm) {
    be.LayerNormForward(out, mean, rstd, ex, ew, ebias, N, C);
    be.LayerNormBackward(edinp, edw, edb, edout, ex, ew, mean, rstd, N, C);
  } else {
    be.RMSNormForward(out, rstd, ex, ew, N, C, kEps);
    be.RMSNormBackward(edinp, edw, edout, ex, ew, rstd, N, C);
  }
  const absl::Status s = be.Synchronize();
  EXPECT_TRUE(s.ok()) << s;
  return {mem.Get(static_cast<const float*>(edinp), n), mem.Get(static_cast<const float*>(edw), C),
          mem.Get(static_cast<const float*>(edb), C)};
}

using NormBackwardTest = BackendParamTest;

TEST_P(NormBackwardTest, MatchesTheCpuBackend) {
  for (Norm norm : {Norm::kLayerNorm, Norm::kRMSNorm}) {
    for (auto [N, C] : kShapes) {
      SCOPED_TRACE(::testing::Message() << NormName(norm) << " " << N << "x" << C);
      const Grads got = RunBackward(be(), norm, N, C, 0), want = RunBackward(CpuBackend(), norm, N, C, 0);
      EXPECT_LE(RelErr(got.dinp, want.dinp), kTol);
      EXPECT_LE(RelErr(got.dweight, want.dweight), kTol);
      // RMSNorm has no bias: its dbias is left as it was, on every backend.
      EXPECT_LE(RelErr(got.dbias, want.dbias), kTol);
    }
  }
}

TEST_P(NormBackwardTest, MisalignedTensorsAndASecondRunGiveTheSameBits) {
  for (Norm norm : {Norm::kLayerNorm, Norm::kRMSNorm}) {
    for (auto [N, C] : kShapes) {
      SCOPED_TRACE(::testing::Message() << NormName(norm) << " " << N << "x" << C);
      const Grads first = RunBackward(be(), norm, N, C, 0);
      for (int shift : {0, 1}) {
        SCOPED_TRACE(shift == 0 ? "again" : "one float off 16-byte alignment");
        const Grads again = RunBackward(be(), norm, N, C, shift);
        EXPECT_TRUE(SameBits(again.dinp, first.dinp)) << "dinp";
        EXPECT_TRUE(SameBits(again.dweight, first.dweight)) << "dweight";
        EXPECT_TRUE(SameBits(again.dbias, first.dbias)) << "dbias";
      }
    }
  }
}

// The norm's backward twice on be over the same random (N,C) problem: from dout's values rounded
// to t, in fp32, then dinp converted to t (the separate passes); and from those values as a t
// tensor with dinp16 (the fused casts). Returns {separate, fused} and the two 16-bit copies.
struct Casts {
  Grads separate, fused;
  std::vector<uint16_t> converted, copy;
};
Casts RunCasts(Backend& be, Norm norm, int N, int C, int shift, Precision t) {
  const size_t n = static_cast<size_t>(N) * C;
  const auto x = RandomNormal(n, 1, 2.f), w = RandomNormal(C, 2), bias = RandomNormal(C, 3), dinp0 = RandomNormal(n, 5),
             dw0 = RandomNormal(C, 6), db0 = RandomNormal(C, 7);
  std::vector<float> dout = RandomNormal(n, 4);
  std::vector<uint16_t> dout16(n);
  for (size_t i = 0; i < n; ++i) {
    dout16[i] = t == Precision::kBf16 ? Bf16Of(dout[i]) : Fp16Of(dout[i]);
    dout[i] = t == Precision::kBf16 ? FloatOfBf16(dout16[i]) : FloatOfFp16(dout16[i]);
  }
  Arena mem(be, 8 * n * sizeof(float) + 16 * static_cast<size_t>(C + N) * sizeof(float) + 4096);
  const float* ex = mem.Put(x, shift);
  const float* ew = mem.Put(w, shift);
  const float* ebias = mem.Put(bias, shift);
  const float* edout = mem.Put(dout, shift);
  const uint16_t* edout16 = mem.Put(dout16, shift);
  float* out = mem.Poisoned<float>(n, shift);
  float* mean = mem.Poisoned<float>(N, shift);
  float* rstd = mem.Poisoned<float>(N, shift);
  if (norm == Norm::kLayerNorm) {
    be.LayerNormForward(out, mean, rstd, ex, ew, ebias, N, C);
  } else {
    be.RMSNormForward(out, rstd, ex, ew, N, C, kEps);
  }
  Casts r;
  for (int fused = 0; fused < 2; ++fused) {
    float* edinp = mem.Put(dinp0, shift);
    float* edw = mem.Put(dw0, shift);
    float* edb = mem.Put(db0, shift);
    uint16_t* e16 = mem.Poisoned<uint16_t>(n, shift);
    const CPtr d = fused == 1 ? CPtr(edout16, t) : CPtr(edout);
    const Ptr copy = fused == 1 ? Ptr(e16, t) : Ptr();
    if (norm == Norm::kLayerNorm) {
      be.LayerNormBackward(edinp, edw, edb, d, ex, ew, mean, rstd, N, C, copy);
    } else {
      be.RMSNormBackward(edinp, edw, d, ex, ew, rstd, N, C, copy);
    }
    if (fused == 0) be.Convert(Ptr(e16, t), edinp, static_cast<int64_t>(n));
    const absl::Status s = be.Synchronize();
    EXPECT_TRUE(s.ok()) << s;
    (fused == 1 ? r.fused : r.separate) = {mem.Get(static_cast<const float*>(edinp), n),
                                           mem.Get(static_cast<const float*>(edw), C),
                                           mem.Get(static_cast<const float*>(edb), C)};
    (fused == 1 ? r.copy : r.converted) = mem.Get(static_cast<const uint16_t*>(e16), n);
  }
  return r;
}

TEST_P(NormBackwardTest, A16BitDoutAndTheCopyOfDinpGiveTheBitsOfTheSeparatePasses) {
  for (Precision t : {Precision::kBf16, Precision::kFp16}) {
    for (Norm norm : {Norm::kLayerNorm, Norm::kRMSNorm}) {
      for (auto [N, C] : kShapes) {
        for (int shift : {0, 1}) {
          SCOPED_TRACE(::testing::Message() << PrecisionName(t) << " " << NormName(norm) << " " << N << "x" << C
                                            << (shift == 1 ? " misaligned" : ""));
          const Casts c = RunCasts(be(), norm, N, C, shift, t);
          if (be().kind() == BackendKind::kCpu) {
            EXPECT_TRUE(SameBits(c.fused.dinp, c.separate.dinp)) << "dinp";
            EXPECT_TRUE(SameBits(c.copy, c.converted)) << "dinp16";
          } else {
            EXPECT_LE(RelErr(c.fused.dinp, c.separate.dinp), kTol) << "dinp";
          }
          EXPECT_TRUE(SameBits(c.fused.dweight, c.separate.dweight)) << "dweight";
          EXPECT_TRUE(SameBits(c.fused.dbias, c.separate.dbias)) << "dbias";
          // The copy is the op's own dinp rounded, on every backend.
          std::vector<uint16_t> rounded(c.fused.dinp.size());
          for (size_t i = 0; i < rounded.size(); ++i) {
            rounded[i] = t == Precision::kBf16 ? Bf16Of(c.fused.dinp[i]) : Fp16Of(c.fused.dinp[i]);
          }
          EXPECT_TRUE(SameBits(c.copy, rounded)) << "dinp16";
        }
      }
    }
  }
}

// The cuda kinds take a copy of dout's own type only (the model's one use); any other pairing is
// refused with an error that names both types. The cpu takes any: its copy is dinp rounded.
TEST_P(NormBackwardTest, ACopyOfAnotherTypeThanDoutIsRefusedOnTheCudaKindsAndTakenOnTheCpu) {
  const bool cpu = be().kind() == BackendKind::kCpu;
  const int N = 4, C = 8;
  Arena mem(be(), 64 * N * C + 4096);
  const auto x = RandomNormal(N * C, 1);
  const float* ex = mem.Put(x, 0);
  const float* ew = mem.Put(RandomNormal(C, 2), 0);
  float* out = mem.Poisoned<float>(N * C, 0);
  float* mean = mem.Poisoned<float>(N, 0);
  float* rstd = mem.Poisoned<float>(N, 0);
  float* dinp = mem.Put(RandomNormal(N * C, 3), 0);
  float* dw = mem.Put(RandomNormal(C, 4), 0);
  float* db = mem.Put(RandomNormal(C, 5), 0);
  uint16_t* d16 = mem.Poisoned<uint16_t>(N * C, 0);
  const uint16_t* dout16 = mem.Put(std::vector<uint16_t>(N * C, 0x3f80), 0);  // 1.0 in bf16 (1.875 in fp16)
  be().LayerNormForward(out, mean, rstd, ex, ew, ew, N, C);
  ASSERT_TRUE(be().Synchronize().ok());
  struct Pairing {
    CPtr dout;
    Precision copy;
    const char* says;
  };
  for (const Pairing& p : {Pairing{CPtr(ex), Precision::kBf16, "dinp16 is bf16 where dout is fp32"},
                           Pairing{CPtr(dout16, Precision::kBf16), Precision::kFp16, "dinp16 is fp16 where dout is bf16"},
                           Pairing{CPtr(dout16, Precision::kFp16), Precision::kBf16, "dinp16 is bf16 where dout is fp16"}}) {
    for (Norm norm : {Norm::kLayerNorm, Norm::kRMSNorm}) {
      SCOPED_TRACE(::testing::Message() << NormName(norm) << ": " << p.says);
      if (norm == Norm::kLayerNorm) {
        be().LayerNormBackward(dinp, dw, db, p.dout, ex, ew, mean, rstd, N, C, Ptr(d16, p.copy));
      } else {
        be().RMSNormBackward(dinp, dw, p.dout, ex, ew, rstd, N, C, Ptr(d16, p.copy));
      }
      const absl::Status s = be().Synchronize();
      if (cpu) {
        ASSERT_TRUE(s.ok()) << s;
        const std::vector<float> now = mem.Get(static_cast<const float*>(dinp), N * C);
        const std::vector<uint16_t> copy = mem.Get(static_cast<const uint16_t*>(d16), N * C);
        for (int i = 0; i < N * C; ++i) {
          EXPECT_EQ(copy[i], p.copy == Precision::kBf16 ? Bf16Of(now[i]) : Fp16Of(now[i])) << "element " << i;
        }
        continue;
      }
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_NE(std::string(s.message()).find(absl::StrCat(norm == Norm::kLayerNorm ? "LayerNormBackward: " : "RMSNormBackward: ", p.says)),
                std::string::npos)
          << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, NormBackwardTest, ::testing::Values(std::string("cpu"), GANTRY_TEST_BACKEND),
                         BackendParamName);

}  // namespace
}  // namespace gantry::kernels
