// Every op of the backend interface (kernels/backend.h) on a backend under test against the
// cpu backend (kernels/cpu, checked against PyTorch in kernels_test), in the manner of ggml's
// test-backend-ops: the same inputs, at least five shapes an op, sizes that are multiples of
// no tile (1, 7, 33, 65, 257, ...) among them, within 1e-5 relative (fp32). Outputs start as
// NaN, so that an element no thread writes fails.
//
// The unit build tests cuda-emulated: kernels/cuda's own launchers and device code compiled
// for the CPU emulator with the same launch geometry, over the emulated runtime and
// cuBLAS(Lt) (kernels/emulated). That is what CI, which has no GPU, can say of the CUDA path.
// tests/gpu builds this file again with GANTRY_TEST_BACKEND=cuda for a real GPU.
#include <gtest/gtest.h>

#include <thread>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "common/rng.h"
#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/emulated/cuda_api.h"
#include "tests/test_util.h"

#ifndef GANTRY_TEST_BACKEND
#define GANTRY_TEST_BACKEND "cuda-emulated"
#endif

namespace gantry::kernels {
namespace {

using testing::RelErr;
constexpr double kTol = 1e-5;  // the fp32 bound; the CPU twins' own tolerances are derived in kernels_test

std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.f) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.Normal()) * scale;
  return v;
}
std::vector<int32_t> Tokens(size_t n, int V, uint64_t seed) {
  Rng r(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(r.NextU64() % static_cast<uint64_t>(V));
  return t;
}

// A buffer of a backend holding a copy of host values (or NaN), read back with Host().
template <typename T>
class Dev {
 public:
  Dev(Backend& be, const std::vector<T>& host) : be_(be), n_(host.size()) {
    p_ = static_cast<T*>(be_.Allocate(std::max<size_t>(n_, 1) * sizeof(T)));
    EXPECT_NE(p_, nullptr);
    be_.CopyToDevice(p_, host.data(), n_ * sizeof(T));
  }
  Dev(Backend& be, size_t n) : Dev(be, std::vector<T>(n, static_cast<T>(NAN))) {}
  ~Dev() { be_.Free(p_); }
  Dev(const Dev&) = delete;
  T* get() const { return p_; }
  std::vector<T> Host() const {
    std::vector<T> h(n_);
    be_.CopyToHost(h.data(), p_, n_ * sizeof(T));
    return h;
  }

 private:
  Backend& be_;
  size_t n_;
  T* p_ = nullptr;
};

class BackendOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto kind = ParseBackendKind(GANTRY_TEST_BACKEND);
    ASSERT_TRUE(kind.ok()) << kind.status();
    auto be = CreateBackend(*kind, 0);
    if (!be.ok() && *kind == BackendKind::kCuda) {
      if (std::getenv("GANTRY_REQUIRE_GPU")) FAIL() << "GANTRY_REQUIRE_GPU is set but: " << be.status();
      GTEST_SKIP() << "no cuda backend here (run tests/gpu/run.sh on a GPU host): " << be.status();
    }
    ASSERT_TRUE(be.ok()) << be.status();
    be_ = std::move(*be);
  }
  void TearDown() override {
    if (be_) {
      EXPECT_TRUE(be_->Synchronize().ok());
    }
  }
  // The op's status so far on the backend under test (its errors are sticky).
  ::testing::AssertionResult Ok() {
    const absl::Status s = be_->Synchronize();
    if (s.ok()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << s;
  }
  Backend& cpu() { return CpuBackend(); }
  Backend& be() { return *be_; }
  std::unique_ptr<Backend> be_;
};

TEST_F(BackendOpsTest, ElementwiseOpsMatchTheCpuBackend) {
  for (int64_t n : {1, 7, 255, 257, 1000, 4099}) {
    SCOPED_TRACE(n);
    const auto x = Random(n, 1, 3.f), a = Random(n, 2), b = Random(n, 3), dout = Random(n, 4), acc1 = Random(n, 5),
               acc2 = Random(n, 6), g = Random(n, 7);
    std::vector<float> out(n), dx(n), res(n), da = acc1, db = acc2, gs = g;
    cpu().GeluForward(out.data(), x.data(), n);
    cpu().GeluBackward(dx.data(), x.data(), dout.data(), n);
    cpu().ResidualForward(res.data(), a.data(), b.data(), n);
    cpu().ResidualBackward(da.data(), db.data(), dout.data(), n);
    cpu().Scale(gs.data(), n, 0.25f);
    Dev<float> dX(be(), x), dA(be(), a), dB(be(), b), dD(be(), dout), eOut(be(), n), eDx(be(), n), eRes(be(), n),
        eDa(be(), acc1), eDb(be(), acc2), eG(be(), g);
    be().GeluForward(eOut.get(), dX.get(), n);
    be().GeluBackward(eDx.get(), dX.get(), dD.get(), n);
    be().ResidualForward(eRes.get(), dA.get(), dB.get(), n);
    be().ResidualBackward(eDa.get(), eDb.get(), dD.get(), n);
    be().Scale(eG.get(), n, 0.25f);
    ASSERT_TRUE(Ok());
    EXPECT_LE(RelErr(eOut.Host(), out), kTol);
    EXPECT_LE(RelErr(eDx.Host(), dx), kTol);
    EXPECT_LE(RelErr(eRes.Host(), res), kTol);
    EXPECT_LE(RelErr(eDa.Host(), da), kTol);
    EXPECT_LE(RelErr(eDb.Host(), db), kTol);
    EXPECT_LE(RelErr(eG.Host(), gs), kTol);
  }
}

TEST_F(BackendOpsTest, AdamWAndSumOfSquaresMatchTheCpuBackend) {
  const AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
  for (int64_t n : {1, 33, 1000, 4097, 70001}) {
    SCOPED_TRACE(n);
    const auto p = Random(n, 1), g = Random(n, 2), m = Random(n, 3, 0.1f);
    auto v = Random(n, 4, 0.1f);
    for (auto& x : v) x = x * x;
    std::vector<float> cp = p, cm = m, cv = v;
    cpu().AdamW(cp.data(), g.data(), cm.data(), cv.data(), n, hp);
    Dev<float> eP(be(), p), eG(be(), g), eM(be(), m), eV(be(), v);
    be().AdamW(eP.get(), eG.get(), eM.get(), eV.get(), n, hp);
    const double got = be().SumSquares(eG.get(), n);
    ASSERT_TRUE(Ok());
    EXPECT_LE(RelErr(eP.Host(), cp), kTol);
    EXPECT_LE(RelErr(eM.Host(), cm), kTol);
    EXPECT_LE(RelErr(eV.Host(), cv), kTol);
    const double want = cpu().SumSquares(g.data(), n);
    EXPECT_LE(std::fabs(got - want), kTol * want);
  }
}

TEST_F(BackendOpsTest, TheEncoderWholeAndVocabularyParallelMatchesTheCpuBackend) {
  // (B, T, C, V, v_begin, v_end, with wpe)
  for (auto [B, T, C, V, vb, ve, pos] :
       {std::tuple{1, 1, 1, 3, 0, 3, true}, std::tuple{2, 7, 33, 50, 0, 50, true}, std::tuple{3, 5, 64, 17, 0, 9, true},
        std::tuple{1, 16, 100, 257, 129, 257, false}, std::tuple{2, 9, 257, 31, 10, 20, false}}) {
    SCOPED_TRACE(::testing::Message() << B << "x" << T << "x" << C << " V " << V << " rows [" << vb << ", " << ve
                                      << ")" << (pos ? " with wpe" : ""));
    const int N = B * T, rows = ve - vb;
    const auto tok = Tokens(N, V, 1);
    const auto wte = Random(static_cast<size_t>(rows) * C, 2), wpe = Random(static_cast<size_t>(T) * C, 3),
               dout = Random(static_cast<size_t>(N) * C, 4), dwte0 = Random(static_cast<size_t>(rows) * C, 5),
               dwpe0 = Random(static_cast<size_t>(T) * C, 6);
    std::vector<float> enc(static_cast<size_t>(N) * C), dwte = dwte0, dwpe = dwpe0;
    cpu().EncoderForward(enc.data(), tok.data(), wte.data(), vb, ve, pos ? wpe.data() : nullptr, B, T, C);
    cpu().EncoderBackward(dwte.data(), pos ? dwpe.data() : nullptr, dout.data(), tok.data(), vb, ve, B, T, C);
    Dev<int32_t> eTok(be(), tok);
    Dev<float> eWte(be(), wte), eWpe(be(), wpe), eDout(be(), dout), eEnc(be(), enc.size()), eDwte(be(), dwte0),
        eDwpe(be(), dwpe0);
    be().EncoderForward(eEnc.get(), eTok.get(), eWte.get(), vb, ve, pos ? eWpe.get() : nullptr, B, T, C);
    be().EncoderBackward(eDwte.get(), pos ? eDwpe.get() : nullptr, eDout.get(), eTok.get(), vb, ve, B, T, C);
    ASSERT_TRUE(Ok());
    EXPECT_LE(RelErr(eEnc.Host(), enc), kTol);
    EXPECT_LE(RelErr(eDwte.Host(), dwte), kTol);
    EXPECT_LE(RelErr(eDwpe.Host(), dwpe), kTol) << "untouched without wpe";
  }
}

TEST_F(BackendOpsTest, LayerNormMatchesTheCpuBackend) {
  for (auto [N, C] : {std::tuple{1, 1}, std::tuple{14, 33}, std::tuple{15, 64}, std::tuple{16, 100},
                      std::tuple{18, 257}, std::tuple{3, 1025}}) {
    SCOPED_TRACE(::testing::Message() << N << "x" << C);
    const auto x = Random(static_cast<size_t>(N) * C, 7, 2.f), w = Random(C, 8), bias = Random(C, 9),
               dout = Random(static_cast<size_t>(N) * C, 4), dinp0 = Random(static_cast<size_t>(N) * C, 10),
               dw0 = Random(C, 11), db0 = Random(C, 12);
    std::vector<float> out(x.size()), mean(N), rstd(N), dinp = dinp0, dw = dw0, db = db0;
    cpu().LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C);
    cpu().LayerNormBackward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                            rstd.data(), N, C);
    Dev<float> eX(be(), x), eW(be(), w), eB(be(), bias), eDout(be(), dout), eOut(be(), x.size()), eMean(be(), N),
        eRstd(be(), N), eDinp(be(), dinp0), eDw(be(), dw0), eDb(be(), db0);
    be().LayerNormForward(eOut.get(), eMean.get(), eRstd.get(), eX.get(), eW.get(), eB.get(), N, C);
    be().LayerNormBackward(eDinp.get(), eDw.get(), eDb.get(), eDout.get(), eX.get(), eW.get(), eMean.get(),
                           eRstd.get(), N, C);
    ASSERT_TRUE(Ok());
    EXPECT_LE(RelErr(eOut.Host(), out), kTol);
    EXPECT_LE(RelErr(eMean.Host(), mean), kTol);
    EXPECT_LE(RelErr(eRstd.Host(), rstd), kTol);
    EXPECT_LE(RelErr(eDinp.Host(), dinp), kTol);
    EXPECT_LE(RelErr(eDw.Host(), dw), kTol);
    EXPECT_LE(RelErr(eDb.Host(), db), kTol);
  }
}

TEST_F(BackendOpsTest, MatmulsInBothLayoutsMatchTheCpuBackend) {
  // (N, C, OC)
  for (auto [N, C, OC] : {std::tuple{1, 1, 1}, std::tuple{7, 33, 65}, std::tuple{64, 64, 64}, std::tuple{37, 100, 13},
                          std::tuple{130, 17, 257}}) {
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << N << "x" << C << "x" << OC
                                          << (layout == WeightLayout::kOutIn ? " OutIn" : " InOut")
                                          << (with_bias ? " bias" : ""));
        const auto x = Random(static_cast<size_t>(N) * C, 1), w = Random(static_cast<size_t>(C) * OC, 2),
                   b = Random(OC, 3), dout = Random(static_cast<size_t>(N) * OC, 4), dw0 = Random(w.size(), 5),
                   db0 = Random(OC, 6);
        std::vector<float> out(static_cast<size_t>(N) * OC), dinp(x.size()), dw = dw0, db = db0;
        cpu().MatmulForward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC, layout);
        cpu().MatmulBackward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), x.data(), w.data(),
                             N, C, OC, layout);
        Dev<float> eX(be(), x), eW(be(), w), eB(be(), b), eDout(be(), dout), eOut(be(), out.size()),
            eDinp(be(), x.size()), eDw(be(), dw0), eDb(be(), db0);
        be().MatmulForward(eOut.get(), eX.get(), eW.get(), with_bias ? eB.get() : nullptr, N, C, OC, layout);
        be().MatmulBackward(eDinp.get(), eDw.get(), with_bias ? eDb.get() : nullptr, eDout.get(), eX.get(), eW.get(),
                            N, C, OC, layout);
        ASSERT_TRUE(Ok());
        EXPECT_LE(RelErr(eOut.Host(), out), kTol);
        EXPECT_LE(RelErr(eDinp.Host(), dinp), kTol);
        EXPECT_LE(RelErr(eDw.Host(), dw), kTol);
        EXPECT_LE(RelErr(eDb.Host(), db), kTol) << "untouched without a bias";
      }
    }
  }
}

TEST_F(BackendOpsTest, TheFusedGeluMatmulsMatchTheCpuBackend) {
  for (auto [N, C, OC] : {std::tuple{1, 1, 1}, std::tuple{7, 33, 65}, std::tuple{64, 64, 256}, std::tuple{37, 100, 13},
                          std::tuple{5, 257, 31}}) {
    SCOPED_TRACE(::testing::Message() << N << "x" << C << "x" << OC);
    const auto x = Random(static_cast<size_t>(N) * C, 1), w = Random(static_cast<size_t>(C) * OC, 2), b = Random(OC, 3),
               dout = Random(static_cast<size_t>(N) * C, 4), dw0 = Random(static_cast<size_t>(OC) * C, 5);
    std::vector<float> pre(static_cast<size_t>(N) * OC), out(pre.size());
    cpu().MatmulBiasGeluForward(pre.data(), out.data(), x.data(), w.data(), b.data(), N, C, OC);
    Dev<float> eX(be(), x), eW(be(), w), eB(be(), b), ePre(be(), pre.size()), eOut(be(), out.size());
    be().MatmulBiasGeluForward(ePre.get(), eOut.get(), eX.get(), eW.get(), eB.get(), N, C, OC);
    ASSERT_TRUE(Ok());
    EXPECT_LE(RelErr(ePre.Host(), pre), kTol);
    EXPECT_LE(RelErr(eOut.Host(), out), kTol);
    // The backward of the next matmul through the GELU: dinp times gelu'(gelu_pre). Here the
    // matmul is (N, OC) → (N, C) with weight (OC, C), and gelu_pre is (N, OC).
    const auto gpre = Random(static_cast<size_t>(N) * OC, 6), w2 = Random(static_cast<size_t>(OC) * C, 7);
    std::vector<float> dinp(static_cast<size_t>(N) * OC), dw = dw0;
    cpu().MatmulBackward(dinp.data(), dw.data(), nullptr, dout.data(), out.data(), w2.data(), N, OC, C,
                         WeightLayout::kInOut, gpre.data());
    Dev<float> eGpre(be(), gpre), eW2(be(), w2), eDout(be(), dout), eDinp(be(), dinp.size()), eDw(be(), dw0);
    be().MatmulBackward(eDinp.get(), eDw.get(), nullptr, eDout.get(), eOut.get(), eW2.get(), N, OC, C,
                        WeightLayout::kInOut, eGpre.get());
    ASSERT_TRUE(Ok());
    EXPECT_LE(RelErr(eDinp.Host(), dinp), kTol);
    EXPECT_LE(RelErr(eDw.Host(), dw), kTol);
  }
}

// Attention through the interface both ways (fused: the log-sum-exp as state; unfused: the
// probabilities), against the cpu backend's probabilities and its log-sum-exp twin.
TEST_F(BackendOpsTest, AttentionBothWaysMatchesTheCpuBackend) {
  for (bool fused : {true, false}) {
    auto kind = ParseBackendKind(GANTRY_TEST_BACKEND);
    BackendOptions options;
    options.fused_attention = fused;
    auto made = CreateBackend(*kind, 0, options);
    ASSERT_TRUE(made.ok()) << made.status();
    Backend& b = **made;
    ASSERT_EQ(b.fused_attention(), fused);
    // (B, T, C, NH): head sizes 1, 8, 11, 16, 32 and lengths that fill no tile.
    for (auto [B, T, C, NH] : {std::tuple{1, 1, 1, 1}, std::tuple{2, 7, 16, 2}, std::tuple{1, 33, 33, 3},
                               std::tuple{2, 17, 64, 4}, std::tuple{1, 65, 32, 1}}) {
      SCOPED_TRACE(::testing::Message() << (fused ? "fused " : "unfused ") << B << "x" << T << "x" << C << " NH "
                                        << NH);
      const size_t n_qkv = static_cast<size_t>(B) * T * 3 * C, n_out = static_cast<size_t>(B) * T * C,
                   n_att = static_cast<size_t>(B) * NH * T * T, n_lse = static_cast<size_t>(B) * NH * T;
      const auto qkv = Random(n_qkv, 1), dout = Random(n_out, 2);
      std::vector<float> out(n_out), att(n_att), dqkv(n_qkv), scratch(n_att), lse(n_lse);
      cpu().AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
      cpu().AttentionBackward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(), att.data(), B, T, C,
                              NH);
      attention_lse(lse.data(), qkv.data(), B, T, C, NH);
      Dev<float> eQkv(b, qkv), eDout(b, dout), eOut(b, n_out), eState(b, fused ? n_lse : n_att), eDqkv(b, n_qkv),
          eScratch(b, n_att);
      b.AttentionForward(eOut.get(), eState.get(), eQkv.get(), B, T, C, NH);
      b.AttentionBackward(eDqkv.get(), eScratch.get(), eDout.get(), eQkv.get(), eOut.get(), eState.get(), B, T, C, NH);
      const absl::Status st = b.Synchronize();
      ASSERT_TRUE(st.ok()) << st;
      EXPECT_LE(RelErr(eOut.Host(), out), kTol);
      EXPECT_LE(RelErr(eState.Host(), fused ? lse : att), kTol);
      EXPECT_LE(RelErr(eDqkv.Host(), dqkv), kTol);
    }
  }
}

// Mixed precision: the softmax's weights exp(s - max) rounded to bf16 (fp16) before they weigh
// V, their sum not, on both backends. One head of size 1 and two tokens: the second query's
// scores are 0.1 (key 0) and 0 (key 1), so its weights are 1 and exp(-0.1) = 0.9048374,
// which rounds to 0.90625 in bf16 and 1853 x 2^-11 = 0.9047852 in fp16 (neither near a
// boundary), and with v = (0, 1) its output is rounded weight / (1 + exp(-0.1)): 0.4757618
// (bf16), 0.4749928 (fp16), against fp32's 0.4750208 (differences of 7.4e-4 and 2.8e-5,
// far above fp32 rounding).
TEST_F(BackendOpsTest, MixedPrecisionAttentionRoundsTheWeightsNotTheirSum) {
  // qkv (1, 2, 3): token 0 = (q 0, k 0.1, v 0), token 1 = (q 1, k 0, v 1).
  const std::vector<float> qkv = {0.f, 0.1f, 0.f, 1.f, 0.f, 1.f};
  const double sum = 1.0 + std::exp(-0.1);
  for (auto [p, w] : {std::pair{Precision::kBf16, 0.90625}, std::pair{Precision::kFp16, 1853.0 / 2048},
                      std::pair{Precision::kFp32, std::exp(-0.1)}}) {
    SCOPED_TRACE(static_cast<int>(p));
    std::vector<float> out(2), att(4);
    cpu().AttentionForward(out.data(), att.data(), qkv.data(), 1, 2, 1, 1, p);
    Dev<float> eQkv(be(), qkv), eOut(be(), 2), eState(be(), 4);
    be().AttentionForward(eOut.get(), eState.get(), eQkv.get(), 1, 2, 1, 1, p);
    ASSERT_TRUE(Ok());
    const auto dev = eOut.Host();
    for (const auto& o : {out, dev}) {
      EXPECT_EQ(o[0], 0.f);
      EXPECT_LE(std::fabs(o[1] - w / sum), 1e-6 * w / sum) << o[1] << " vs " << w / sum;
    }
  }
}

TEST_F(BackendOpsTest, TheClassifierWholeAndVocabularyParallelMatchesTheCpuBackend) {
  for (auto [N, V] : {std::tuple{1, 1}, std::tuple{7, 33}, std::tuple{16, 257}, std::tuple{3, 1000},
                      std::tuple{33, 1256}}) {
    SCOPED_TRACE(::testing::Message() << N << " rows, V " << V);
    const auto logits = Random(static_cast<size_t>(N) * V, 1, 3.f);
    const auto tgt = Tokens(N, V, 2);
    std::vector<float> losses(N), fused_losses(N), grad = logits;
    cpu().CrossEntropyForward(losses.data(), logits.data(), tgt.data(), N, V);
    cpu().CrossEntropyFusedForwardBackward(fused_losses.data(), grad.data(), tgt.data(), 0.5f / N, N, V);
    Dev<int32_t> eT(be(), tgt);
    Dev<float> eL(be(), logits), eLoss(be(), N), eGrad(be(), logits), eFused(be(), N);
    be().CrossEntropyForward(eLoss.get(), eL.get(), eT.get(), N, V);
    be().CrossEntropyFusedForwardBackward(eFused.get(), eGrad.get(), eT.get(), 0.5f / N, N, V);
    ASSERT_TRUE(Ok());
    EXPECT_LE(RelErr(eLoss.Host(), losses), kTol);
    EXPECT_LE(RelErr(eFused.Host(), fused_losses), kTol);
    EXPECT_LE(RelErr(eGrad.Host(), grad), kTol);

    // Split over 2 and 3 ranks: each rank's stats of its columns, gathered, then each rank's
    // losses and gradient columns.
    for (int ranks : {2, 3}) {
      if (V < ranks) continue;
      std::vector<float> all_cpu(static_cast<size_t>(ranks) * N * 3), all_be(all_cpu.size());
      std::vector<std::vector<float>> slices;
      for (int r = 0; r < ranks; ++r) {
        const int vb = V * r / ranks, ve = V * (r + 1) / ranks;
        std::vector<float> slice(static_cast<size_t>(N) * (ve - vb));
        for (int n = 0; n < N; ++n) {
          std::copy_n(logits.data() + static_cast<size_t>(n) * V + vb, ve - vb, slice.data() + static_cast<size_t>(n) * (ve - vb));
        }
        cpu().CrossEntropyShardStats(all_cpu.data() + static_cast<size_t>(r) * N * 3, slice.data(), tgt.data(), N,
                                     ve - vb, vb);
        Dev<float> eSlice(be(), slice), eStats(be(), static_cast<size_t>(N) * 3);
        be().CrossEntropyShardStats(eStats.get(), eSlice.get(), eT.get(), N, ve - vb, vb);
        ASSERT_TRUE(Ok());
        const auto got = eStats.Host();
        std::copy(got.begin(), got.end(), all_be.begin() + static_cast<ptrdiff_t>(r) * N * 3);
        slices.push_back(std::move(slice));
      }
      EXPECT_LE(RelErr(all_be, all_cpu), kTol) << ranks << " ranks' stats";
      Dev<float> eAll(be(), all_cpu);
      for (int r = 0; r < ranks; ++r) {
        const int vb = V * r / ranks, ve = V * (r + 1) / ranks;
        std::vector<float> shard_losses(N), g = slices[static_cast<size_t>(r)];
        cpu().CrossEntropyShardFinish(shard_losses.data(), g.data(), all_cpu.data(), ranks, tgt.data(), 0.5f / N, N,
                                      ve - vb, vb);
        Dev<float> eG(be(), slices[static_cast<size_t>(r)]), eSL(be(), N);
        be().CrossEntropyShardFinish(eSL.get(), eG.get(), eAll.get(), ranks, eT.get(), 0.5f / N, N, ve - vb, vb);
        ASSERT_TRUE(Ok());
        EXPECT_LE(RelErr(eSL.Host(), shard_losses), kTol) << "rank " << r << " of " << ranks;
        EXPECT_LE(RelErr(eG.Host(), g), kTol) << "rank " << r << " of " << ranks;
        EXPECT_LE(RelErr(shard_losses, fused_losses), kTol) << "the split loss is the whole one";
      }
    }
  }
}

TEST_F(BackendOpsTest, Bf16CastsMatchTheCpuBackendBitForBit) {
  for (int64_t n : {1, 7, 257, 1000, 70001}) {
    SCOPED_TRACE(n);
    auto x = Random(n, 21, 100.f);
    const float edges[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 3.4028235e38f, INFINITY, -INFINITY, -0.0f, 1e-40f, NAN};
    for (size_t i = 0; i < std::size(edges) && i < x.size(); ++i) x[i] = edges[i];
    std::vector<uint16_t> want(n);
    std::vector<float> back(n);
    cpu().CastToBf16(want.data(), x.data(), n);
    cpu().CastFromBf16(back.data(), want.data(), n);
    Dev<float> eX(be(), x), eBack(be(), n);
    Dev<uint16_t> eB(be(), std::vector<uint16_t>(n, 0xffff));
    be().CastToBf16(eB.get(), eX.get(), n);
    be().CastFromBf16(eBack.get(), eB.get(), n);
    ASSERT_TRUE(Ok());
    EXPECT_EQ(eB.Host(), want);
    const auto got = eBack.Host();
    EXPECT_EQ(std::memcmp(got.data(), back.data(), n * sizeof(float)), 0);
  }
}

TEST_F(BackendOpsTest, RoundToMatchesTheCpuBackendBitForBit) {
  for (int64_t n : {1, 7, 257, 1000, 70001}) {
    SCOPED_TRACE(n);
    auto x = Random(n, 23, 1000.f);
    const float edges[] = {65504.f, 65520.f, -70000.f, 0x1p-14f, 0x1p-25f, 3 * 0x1p-25f, 1e-9f, 1.0f + 0x1p-11f,
                           3.4028235e38f, INFINITY, -0.0f, 1e-40f, NAN};
    for (size_t i = 0; i < std::size(edges) && i < x.size(); ++i) x[i] = edges[i];
    for (Precision p : {Precision::kBf16, Precision::kFp16, Precision::kFp32}) {
      std::vector<float> want(n);
      cpu().RoundTo(want.data(), x.data(), n, p);
      Dev<float> eX(be(), x), eOut(be(), n), eIn(be(), x);
      be().RoundTo(eOut.get(), eX.get(), n, p);
      be().RoundTo(eIn.get(), eIn.get(), n, p);  // in place
      ASSERT_TRUE(Ok());
      const auto got = eOut.Host(), in_place = eIn.Host();
      EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0) << static_cast<int>(p);
      EXPECT_EQ(std::memcmp(in_place.data(), want.data(), n * sizeof(float)), 0) << static_cast<int>(p);
    }
  }
}

TEST_F(BackendOpsTest, CopiesAndZeroKeepBytes) {
  for (size_t n : {size_t{1}, size_t{3}, size_t{1000}, size_t{4097}, size_t{1} << 16}) {
    const auto x = Random(n, 9);
    Dev<float> a(be(), x), b(be(), n), z(be(), x);
    be().Copy(b.get(), a.get(), n * sizeof(float));
    be().Zero(z.get(), n * sizeof(float));
    ASSERT_TRUE(Ok());
    EXPECT_EQ(b.Host(), x);
    EXPECT_EQ(z.Host(), std::vector<float>(n, 0.f));
  }
}

// Work on a second stream that waits for an event recorded on the first sees the first's
// results; the host waits for an event; the current stream is what SetStream chose; a
// handle that is not the backend's is an error naming the call. On the cpu backend too,
// whose streams order trivially (everything runs at issue).
TEST_F(BackendOpsTest, StreamsAndEventsOrderWorkAndRefuseForeignHandles) {
  for (Backend* b : {&be(), &cpu()}) {
    SCOPED_TRACE(b->Describe());
    const int64_t n = 1000;
    const auto a = Random(n, 11);
    Dev<float> dA(*b, a), y(*b, n), z(*b, n);
    Backend::Stream s1 = b->NewStream();
    Backend::Event e1 = b->NewEvent(), e2 = b->NewEvent();
    ASSERT_NE(s1, nullptr);
    ASSERT_NE(e1, nullptr);
    EXPECT_EQ(b->current_stream(), nullptr) << "the backend's own stream at start";
    b->ResidualForward(y.get(), dA.get(), dA.get(), n);  // y = 2a, on the own stream
    b->Record(e1);
    b->SetStream(s1);
    EXPECT_EQ(b->current_stream(), s1);
    b->Wait(e1);
    b->Scale(y.get(), n, 0.25f);                    // y = a/2, on s1 after the own stream's y
    b->ResidualForward(z.get(), y.get(), dA.get(), n);  // z = 1.5a
    b->Record(e2);
    b->SetStream(nullptr);
    EXPECT_EQ(b->current_stream(), nullptr);
    EXPECT_TRUE(b->SynchronizeEvent(e2).ok());
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = a[static_cast<size_t>(i)] * 0.5f + a[static_cast<size_t>(i)];
    EXPECT_LE(RelErr(z.Host(), want), kTol);
    if (b->kind() == BackendKind::kCpu) {
      EXPECT_EQ(b->native_stream(s1), nullptr);
    } else {
      EXPECT_NE(b->native_stream(s1), nullptr);
      EXPECT_NE(b->native_stream(nullptr), nullptr) << "the own stream, for NCCL";
      EXPECT_NE(b->native_stream(s1), b->native_stream(nullptr));
    }
    EXPECT_TRUE(b->Synchronize().ok());
    int not_a_handle = 0;
    b->SetStream(reinterpret_cast<Backend::Stream>(&not_a_handle));
    EXPECT_EQ(b->current_stream(), nullptr) << "a foreign stream is not taken";
    absl::Status s = b->Synchronize();
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("SetStream: not a live stream"), std::string::npos) << s;
    b->SetStream(s1);
    b->FreeStream(s1);
    EXPECT_EQ(b->current_stream(), nullptr) << "freeing the current stream goes back to the own one";
    b->FreeStream(s1);
    s = b->Synchronize();
    EXPECT_NE(s.message().find("FreeStream: not a live stream"), std::string::npos) << s;
    b->FreeEvent(e1);
    b->FreeEvent(e2);
    EXPECT_TRUE(b->Synchronize().ok());
  }
}

// A peer (another backend on the device, for a second thread: ZeroEngine's communication
// thread) shares the device's memory: what one writes the other reads once the host has
// ordered them, from another thread bound to the device. The cuda kinds do not let the host
// address their memory (cuda-emulated neither, so that CI runs cuda's paths).
TEST_F(BackendOpsTest, APeerOnAnotherThreadSharesTheDeviceMemory) {
  EXPECT_TRUE(cpu().host_addressable());
  EXPECT_FALSE(be().host_addressable()) << be().Describe();
  for (Backend* b : {&be(), &cpu()}) {
    SCOPED_TRACE(b->Describe());
    auto peer = b->NewPeer();
    ASSERT_TRUE(peer.ok()) << peer.status();
    EXPECT_EQ((*peer)->kind(), b->kind());
    EXPECT_EQ((*peer)->Describe(), b->Describe()) << "the same device";
    const int64_t n = 777;
    const auto a = Random(n, 21);
    Dev<float> x(*b, a), y(*b, n);
    b->Scale(x.get(), n, 2.f);  // x = 2a, on b
    ASSERT_TRUE(b->Synchronize().ok());
    absl::Status on_thread;
    float* from_peer = nullptr;
    std::thread t([&] {
      Backend& p = **peer;
      on_thread = p.BindThread();
      from_peer = static_cast<float*>(p.Allocate(n * sizeof(float)));
      p.ResidualForward(y.get(), x.get(), x.get(), n);  // y = 4a, by the peer on b's memory
      p.Copy(from_peer, y.get(), n * sizeof(float));
      p.Scale(from_peer, n, 0.5f);                      // 2a, in the peer's memory
      if (on_thread.ok()) on_thread = p.Synchronize();
    });
    t.join();
    ASSERT_TRUE(on_thread.ok()) << on_thread;
    ASSERT_NE(from_peer, nullptr);
    std::vector<float> four(a), two(a), got(static_cast<size_t>(n));
    for (float& v : four) v *= 4.f;
    for (float& v : two) v *= 2.f;
    EXPECT_LE(RelErr(y.Host(), four), kTol);
    b->CopyToHost(got.data(), from_peer, got.size() * sizeof(float));  // the peer's memory, read by b
    EXPECT_LE(RelErr(got, two), kTol);
    (*peer)->Free(from_peer);
    EXPECT_TRUE(b->Synchronize().ok());
    EXPECT_TRUE((*peer)->Synchronize().ok());
  }
}

TEST_F(BackendOpsTest, ABadShapeIsAnErrorNamingTheOpAndTheBackend) {
  Dev<float> a(be(), 16), b(be(), 16);
  be().MatmulForward(a.get(), b.get(), b.get(), nullptr, 0, 4, 4);
  const absl::Status s = be().Synchronize();
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("MatmulForward"), std::string::npos) << s;
  EXPECT_NE(s.message().find(be().Describe()), std::string::npos) << s;
  EXPECT_TRUE(be().Synchronize().ok()) << "reported once";
}

}  // namespace
}  // namespace gantry::kernels

// The emulated runtime itself (kernels/emulated/cuda_api.h).
namespace gantry::emucuda {
namespace {

using testing::RelErr;
constexpr double kTol = 1e-5;

std::vector<float> Random(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.Normal());
  return v;
}

TEST(EmulatedRuntimeTest, ACopyNamingTheWrongSideFailsAsTheRealRuntimeDoes) {
  std::vector<float> host(16, 1.f);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 16 * sizeof(float)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(dev, host.data(), 16 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(host.data(), dev, 17 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue)
      << "past the allocation";
  EXPECT_EQ(cudaMemcpy(host.data(), host.data() + 8, 8 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue)
      << "a host pointer as the device side";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "reading the error clears it";
  EXPECT_EQ(cudaFree(host.data()), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

TEST(EmulatedRuntimeTest, SgemmStridedBatchedKeepsCublasContract) {
  // Column-major C_i (m, n) = op(A_i) op(B_i) + beta C_i with leading dimensions above the
  // rows, against a loop written from cuBLAS's definition.
  const int m = 5, n = 3, k = 4, lda = 7, ldb = 6, ldc = 9, batch = 3;
  const long long sa = lda * m + 2, sb = ldb * n + 1, sc = ldc * n + 3;
  for (auto [ta, tb] : {std::pair{CUBLAS_OP_N, CUBLAS_OP_N}, std::pair{CUBLAS_OP_T, CUBLAS_OP_N},
                        std::pair{CUBLAS_OP_N, CUBLAS_OP_T}, std::pair{CUBLAS_OP_T, CUBLAS_OP_T}}) {
    const auto A = Random(sa * batch, 1), B = Random(sb * batch, 2), C0 = Random(sc * batch, 3);
    std::vector<float> C = C0, want = C0;
    const float alpha = 0.5f, beta = 2.f;
    for (int i = 0; i < batch; ++i) {
      for (int c = 0; c < n; ++c) {
        for (int r = 0; r < m; ++r) {
          double s = 0;
          for (int p = 0; p < k; ++p) {
            const float a = ta == CUBLAS_OP_N ? A[i * sa + p * lda + r] : A[i * sa + r * lda + p];
            const float b = tb == CUBLAS_OP_N ? B[i * sb + c * ldb + p] : B[i * sb + p * ldb + c];
            s += static_cast<double>(a) * b;
          }
          float& w = want[i * sc + c * ldc + r];
          w = static_cast<float>(alpha * s + beta * w);
        }
      }
    }
    cublasHandle_t h;
    ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, A.data(), lda, sa, B.data(), ldb, sb, &beta,
                                        C.data(), ldc, sc, batch),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_LE(RelErr(C, want), kTol);
    EXPECT_EQ(cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, A.data(), 1, sa, B.data(), ldb, sb, &beta,
                                        C.data(), ldc, sc, batch),
              CUBLAS_STATUS_INVALID_VALUE)
        << "lda below op(A)'s stored rows";
    cublasDestroy(h);
  }
}

// cublasLtMatmul with 16-bit types, as kernels/cuda/matmul.cu calls it: D (m, n) = op(A) op(B)
// + beta C (+ bias), C = D. align: the preference's minimum alignment of every matrix (0: not set,
// cuBLASLt's 256). The first status that is not success, of the heuristic or the matmul.
cublasStatus_t Lt(cublasLtHandle_t h, cudaDataType_t ab, cudaDataType_t dt, cublasOperation_t ta, int m, int n, int k,
                  const void* A, int lda, const void* B, int ldb, void* D, int ldd, float beta, const void* bias,
                  uint32_t align = 0) {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasStatus_t st = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t tb = CUBLAS_OP_N;
  const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (st == CUBLAS_STATUS_SUCCESS && bias != nullptr) {
    st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
  }
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&la, ab, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&lb, ab, k, n, ldb);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&ld, dt, m, n, ldd);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (st == CUBLAS_STATUS_SUCCESS && align != 0) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  }
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &result, &found);
  const float alpha = 1.f;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmul(h, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &result.algo, nullptr, 0, nullptr);
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {la, lb, ld}) {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
  if (op) cublasLtMatmulDescDestroy(op);
  return st;
}

// 16-bit A and B (bf16, fp16) into an fp32 or same-type D, with and without C (beta 1 or 0: C
// not read) and a bias of D's type, against a loop from the definition (exact products, sums
// in double): within an fp32 sum's bound, (k + 2) 2^-24 S with S the sum of the terms'
// magnitudes (k products, C and the bias), and half an ulp of D's type for its rounding. The
// rows of D past m (its leading dimension's padding) are not written.
TEST(EmulatedRuntimeTest, LtMatmulOf16BitInputsKeepsCublasLtContract) {
  using kernels::Precision;
  const int m = 5, n = 3, k = 7, lda = k + 2, ldb = k + 1, ldd = m + 3;
  cublasLtHandle_t h;
  ASSERT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
  for (Precision p : {Precision::kBf16, Precision::kFp16}) {
    const cudaDataType_t ab = p == Precision::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
    auto draw = [&](size_t count, uint64_t seed) {
      std::vector<uint16_t> v(count);
      const auto x = Random(count, seed);
      for (size_t i = 0; i < count; ++i) v[i] = kernels::Of16(x[i], p);
      return v;
    };
    const auto A = draw(static_cast<size_t>(lda) * m, 1), B = draw(static_cast<size_t>(ldb) * n, 2);
    for (bool d16 : {false, true}) {
      for (float beta : {0.f, 1.f}) {
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE(::testing::Message() << kernels::PrecisionName(p) << (d16 ? " D 16-bit" : " D fp32") << " beta "
                                            << beta << (with_bias ? " bias" : ""));
          const auto c16 = draw(static_cast<size_t>(ldd) * n, 3), bias16 = draw(m, 4);
          const auto c32 = Random(static_cast<size_t>(ldd) * n, 3), bias32 = Random(m, 4);
          // D starts as C (beta 1) or as NaN (beta 0: it must not be read).
          std::vector<uint16_t> D16(static_cast<size_t>(ldd) * n, 0xffff);
          std::vector<float> D32(static_cast<size_t>(ldd) * n, NAN);
          if (beta != 0.f) D16 = c16, D32 = c32;
          const std::vector<uint16_t> D16_0 = D16;
          const std::vector<float> D32_0 = D32;
          auto c_at = [&](int i, int j) -> double {
            const size_t at = static_cast<size_t>(j) * ldd + i;
            return beta == 0.f ? 0.0 : d16 ? kernels::FloatOf16(c16[at], p) : c32[at];
          };
          auto bias_at = [&](int i) -> double {
            return !with_bias ? 0.0 : d16 ? kernels::FloatOf16(bias16[i], p) : bias32[i];
          };
          const void* bias = !with_bias ? nullptr : d16 ? static_cast<const void*>(bias16.data()) : bias32.data();
          void* D = d16 ? static_cast<void*>(D16.data()) : D32.data();
          // Host vectors: told their alignment (2 bytes; the default assumes cudaMalloc's 256).
          ASSERT_EQ(Lt(h, ab, d16 ? ab : CUDA_R_32F, CUBLAS_OP_T, m, n, k, A.data(), lda, B.data(), ldb, D, ldd, beta,
                       bias, 2),
                    CUBLAS_STATUS_SUCCESS);
          for (int j = 0; j < n; ++j) {
            for (int i = 0; i < ldd; ++i) {
              const size_t at = static_cast<size_t>(j) * ldd + i;
              if (i >= m) {  // padding: untouched
                if (d16) {
                  EXPECT_EQ(D16[at], D16_0[at]);
                } else {
                  EXPECT_EQ(std::memcmp(&D32[at], &D32_0[at], 4), 0);
                }
                continue;
              }
              double want = c_at(i, j) + bias_at(i), s = std::fabs(c_at(i, j)) + std::fabs(bias_at(i));
              for (int q = 0; q < k; ++q) {  // op(A) = A^T: A stored (k, m)
                const double t = static_cast<double>(kernels::FloatOf16(A[static_cast<size_t>(i) * lda + q], p)) *
                                 kernels::FloatOf16(B[static_cast<size_t>(j) * ldb + q], p);
                want += t;
                s += std::fabs(t);
              }
              const double got = d16 ? kernels::FloatOf16(D16[at], p) : D32[at];
              double tol = (k + 2) * 0x1p-24 * s;
              if (d16) {  // and half an ulp of the 16-bit result
                int e = 0;
                std::frexp(std::max(std::fabs(got), 1e-30), &e);
                tol += std::ldexp(1.0, std::max(e - 1, p == Precision::kBf16 ? -126 : -14) -
                                           (p == Precision::kBf16 ? 8 : 11));
              }
              EXPECT_LE(std::fabs(got - want), tol) << "D(" << i << ", " << j << ")";
            }
          }
        }
      }
    }
    // cuBLASLt's types for CUBLAS_COMPUTE_32F: A and B alike; D fp32 or A's 16-bit type.
    std::vector<float> D(static_cast<size_t>(ldd) * n);
    const cudaDataType_t other = ab == CUDA_R_16BF ? CUDA_R_16F : CUDA_R_16BF;
    EXPECT_EQ(Lt(h, ab, other, CUBLAS_OP_T, m, n, k, A.data(), lda, B.data(), ldb, D.data(), ldd, 0.f, nullptr, 2),
              CUBLAS_STATUS_NOT_SUPPORTED)
        << "a D of the other 16-bit type";
    EXPECT_EQ(Lt(h, CUDA_R_32F, ab, CUBLAS_OP_T, m, n, k, D.data(), lda, D.data(), ldb, D.data(), ldd, 0.f, nullptr, 2),
              CUBLAS_STATUS_NOT_SUPPORTED)
        << "fp32 inputs, a 16-bit D";
    // A pointer less aligned than the algorithm assumes: refused; told the alignment, taken.
    std::vector<uint16_t> D16(static_cast<size_t>(ldd) * n + 1);
    EXPECT_EQ(Lt(h, ab, ab, CUBLAS_OP_T, m, n, k, A.data() + 1, lda, B.data(), ldb, D16.data(), ldd, 0.f, nullptr),
              CUBLAS_STATUS_INVALID_VALUE)
        << "A 2 bytes past an aligned address, with the default preference (256)";
    EXPECT_EQ(Lt(h, ab, ab, CUBLAS_OP_T, m, n, k, A.data() + 1, lda, B.data(), ldb, D16.data(), ldd, 0.f, nullptr, 2),
              CUBLAS_STATUS_SUCCESS);
  }
  // A and B of two types; C and D of two types.
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, b16, c, d;
  cublasLtMatmulPreference_t pref;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, m, k, m), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&b, CUDA_R_16F, k, n, k), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&b16, CUDA_R_16BF, k, n, k), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, m, n, m), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, m, n, m), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(h, op, a, b, d, d, pref, 1, &result, &found), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(h, op, a, b16, d, d, pref, 1, &result, &found), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(h, op, a, b16, c, d, pref, 1, &result, &found), CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {a, b, b16, c, d}) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(h);
}

}  // namespace
}  // namespace gantry::emucuda
