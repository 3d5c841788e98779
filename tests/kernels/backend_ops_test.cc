// Over 700 lines: one file holds every op's case so that one binary runs them all on the
// backend under test (cuda-emulated here; cuda on a GPU host, as cuda_backend_ops_test).
// Every op of the backend interface (kernels/backend.h) on a backend under test against the
// cpu backend (kernels/cpu, checked against PyTorch in kernels_test), in the manner of ggml's
// test-backend-ops: the same inputs, at least five shapes an op, sizes that are multiples of
// no tile (1, 7, 33, 65, 257, ...) among them, within 1e-5 relative (fp32). Outputs start as
// NaN, so that an element no thread writes fails. The typed ops again with bf16 and fp16
// tensors, bit for bit or within bounds derived from the arithmetic ("16-bit tensors" below).
//
// The unit build tests cuda-emulated: kernels/cuda's own launchers and device code compiled
// for the CPU emulator with the same launch geometry, over the emulated runtime and
// cuBLAS(Lt) (kernels/emulated). That is what CI, which has no GPU, can say of the CUDA path.
// tests/gpu builds this file again with GANTRY_TEST_BACKEND=cuda for a real GPU.
#include <gtest/gtest.h>
#include <omp.h>

#include <thread>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/rng.h"
#include "kernels/attention.h"
#include "kernels/backend.h"
#include "kernels/emulated/cuda_api.h"
#include "kernels/emulated/cudnn_frontend.h"
#include "kernels/gqa.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "kernels/moe.h"
#include "tests/test_util.h"

#ifndef GANTRY_TEST_BACKEND
#define GANTRY_TEST_BACKEND "cuda-emulated"
#endif

namespace gantry::kernels {
namespace {

using testing::RelErr;
constexpr double kTol = 1e-5;  // the issue's fp32 bound; the CPU twins' own tolerances are derived in kernels_test

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
  // Another backend of the kind under test, on the cuDNN attention path (AttentionPath::kCudnn).
  static absl::StatusOr<std::unique_ptr<Backend>> CudnnBackend() {
    BackendOptions options;
    options.attention = AttentionPath::kCudnn;
    return CreateBackend(*ParseBackendKind(GANTRY_TEST_BACKEND), 0, options);
  }
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

// AdamW over many spans (a launch per 32 on a GPU): 70 spans of lengths 0 to 5,000 in one
// buffer, each with its own weight decay, some writing a bf16 (or fp16) working copy, with a
// clip multiplier in device memory. The bits are those of the backend's own AdamW span by
// span (the gradients scaled first) and then its Convert of each span's parameters, and within
// the cpu tolerance of the cpu backend's.
TEST_F(BackendOpsTest, AdamWOverSpansGivesTheBitsOfAdamWThenConvertSpanBySpan) {
  for (Precision wp : {Precision::kBf16, Precision::kFp16}) {
    SCOPED_TRACE(wp == Precision::kBf16 ? "bf16 working copies" : "fp16 working copies");
    const AdamWParams base{1e-2f, 0.9f, 0.95f, 1e-8f, 0.f, 3};
    std::vector<int64_t> at{0}, len;
    for (int k = 0; k < 70; ++k) {
      len.push_back(k % 7 == 0 ? 0 : k % 5 == 0 ? 1 : (k * 733) % 5000);
      at.push_back(at.back() + len.back());
    }
    const int64_t n = at.back();
    const auto p = Random(n, 1), g = Random(n, 2), m = Random(n, 3, 0.1f);
    auto v = Random(n, 4, 0.1f);
    for (auto& x : v) x = x * x;
    const std::vector<float> multiplier{0.375f};
    // Twice on the backend: spans, then span by span; once span by span on the cpu.
    Dev<float> sP(be(), p), sG(be(), g), sM(be(), m), sV(be(), v), sScale(be(), multiplier);
    Dev<float> oP(be(), p), oG(be(), g), oM(be(), m), oV(be(), v);
    Dev<uint16_t> sW(be(), std::vector<uint16_t>(static_cast<size_t>(n), 0)), oW(be(), std::vector<uint16_t>(static_cast<size_t>(n), 0));
    std::vector<float> cp = p, cg = g, cm = m, cv = v;
    std::vector<uint16_t> cw(static_cast<size_t>(n), 0);
    std::vector<AdamWSpan> spans;
    for (size_t k = 0; k < len.size(); ++k) {
      const int64_t o = at[k], l = len[k];
      const float decay = k % 3 == 0 ? 0.f : 0.1f;
      const bool working = k % 4 != 1;
      spans.push_back({sP.get() + o, sG.get() + o, sM.get() + o, sV.get() + o, l, decay,
                       working ? Ptr(sW.get() + o, wp) : Ptr()});
      AdamWParams hp = base;
      hp.weight_decay = decay;
      be().Scale(oG.get() + o, l, multiplier[0]);
      be().AdamW(oP.get() + o, oG.get() + o, oM.get() + o, oV.get() + o, l, hp);
      if (working) be().Convert(Ptr(oW.get() + o, wp), oP.get() + o, l);
      cpu().Scale(cg.data() + o, l, multiplier[0]);
      cpu().AdamW(cp.data() + o, cg.data() + o, cm.data() + o, cv.data() + o, l, hp);
      if (working) cpu().Convert(Ptr(cw.data() + o, wp), cp.data() + o, l);
    }
    AdamWParams hp = base;
    hp.grad_scale = sScale.get();
    be().AdamWSpans(spans.data(), static_cast<int>(spans.size()), hp);
    ASSERT_TRUE(Ok());
    EXPECT_EQ(sP.Host(), oP.Host());
    EXPECT_EQ(sM.Host(), oM.Host());
    EXPECT_EQ(sV.Host(), oV.Host());
    EXPECT_EQ(sW.Host(), oW.Host());
    EXPECT_EQ(sG.Host(), g) << "the gradients stay unscaled";
    EXPECT_LE(RelErr(sP.Host(), cp), kTol);
    EXPECT_LE(RelErr(sM.Host(), cm), kTol);
    EXPECT_LE(RelErr(sV.Host(), cv), kTol);
    const std::vector<uint16_t> w = sW.Host();
    size_t far = 0;  // working copies more than one unit in the last place from the cpu's
    for (size_t i = 0; i < w.size(); ++i) far += std::abs(static_cast<int>(w[i]) - static_cast<int>(cw[i])) > 1;
    EXPECT_EQ(far, 0u);
  }
}

TEST_F(BackendOpsTest, TheEncoderWholeAndVocabularyParallelMatchesTheCpuBackend) {
  // (B, T, C, V, v_begin, v_end, with wpe)
  for (auto [B, T, C, V, vb, ve, pos] :
       {std::tuple{1, 1, 1, 3, 0, 3, true}, std::tuple{2, 7, 33, 50, 0, 50, true}, std::tuple{3, 5, 64, 17, 0, 9, true},
        std::tuple{1, 16, 100, 257, 129, 257, false}, std::tuple{2, 9, 257, 31, 10, 20, false},
        // 1,100 rows: the wte gradient's warps split the token ids by residue mod 4
        std::tuple{4, 275, 40, 97, 20, 90, true}}) {
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
    // Bit for bit: every backend adds a token's rows of dout into its row in (b, t) order.
    EXPECT_EQ(eDwte.Host(), dwte);
    EXPECT_LE(RelErr(eDwpe.Host(), dwpe), kTol) << "untouched without wpe";
  }
}

TEST_F(BackendOpsTest, LayerNormMatchesTheCpuBackend) {
  // C up to 1024 takes the one-pass backward (several blocks of rows from N 2049 on; C not a
  // multiple of 4 its scalar loads), C over 1024 the two passes (norm_backward_test has more).
  for (auto [N, C] : {std::tuple{1, 1}, std::tuple{14, 33}, std::tuple{15, 64}, std::tuple{16, 100},
                      std::tuple{18, 257}, std::tuple{3, 1025}, std::tuple{2051, 12}, std::tuple{300, 768},
                      std::tuple{9, 1024}}) {
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
    // Fixed-order sums: the same bits again.
    Dev<float> eDinp2(be(), dinp0), eDw2(be(), dw0), eDb2(be(), db0);
    be().LayerNormBackward(eDinp2.get(), eDw2.get(), eDb2.get(), eDout.get(), eX.get(), eW.get(), eMean.get(),
                           eRstd.get(), N, C);
    ASSERT_TRUE(Ok());
    EXPECT_EQ(eDinp2.Host(), eDinp.Host());
    EXPECT_EQ(eDw2.Host(), eDw.Host());
    EXPECT_EQ(eDb2.Host(), eDb.Host());
  }
}

// The Llama-family ops (kernels/rmsnorm.h, rope.h, swiglu.h, gqa.h): RMSNorm both ways, RoPE with grouped KV heads
// both ways, the SwiGLU gate both ways, in fp32 and bf16 (a 16-bit op reads exact values,
// computes in fp32, rounds once: the cpu's bits, or one ulp where fp32 math differs).
TEST_F(BackendOpsTest, LlamaOpsMatchTheCpuBackend) {
  for (auto [N, C] : {std::tuple{1, 1}, std::tuple{14, 33}, std::tuple{18, 257}, std::tuple{3, 1025}}) {
    SCOPED_TRACE(::testing::Message() << "RMSNorm " << N << "x" << C);
    const auto x = Random(static_cast<size_t>(N) * C, 7, 2.f), w = Random(C, 8), dout = Random(static_cast<size_t>(N) * C, 4),
               dinp0 = Random(static_cast<size_t>(N) * C, 10), dw0 = Random(C, 11);
    std::vector<float> out(x.size()), rstd(N), dinp = dinp0, dw = dw0;
    cpu().RMSNormForward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    cpu().RMSNormBackward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    Dev<float> eX(be(), x), eW(be(), w), eDout(be(), dout), eOut(be(), x.size()), eRstd(be(), N), eDinp(be(), dinp0),
        eDw(be(), dw0);
    be().RMSNormForward(eOut.get(), eRstd.get(), eX.get(), eW.get(), N, C, 1e-5f);
    be().RMSNormBackward(eDinp.get(), eDw.get(), eDout.get(), eX.get(), eW.get(), eRstd.get(), N, C);
    ASSERT_TRUE(Ok());
    EXPECT_LE(RelErr(eOut.Host(), out), kTol);
    EXPECT_LE(RelErr(eRstd.Host(), rstd), kTol);
    EXPECT_LE(RelErr(eDinp.Host(), dinp), kTol);
    EXPECT_LE(RelErr(eDw.Host(), dw), kTol);
  }
  // (T 32769 x hd 128: the angles' table would outgrow the cuda kinds' scratch, so they rotate
  // pair by pair, as every call did before the table)
  for (auto [B, T, NH, NKV, hd] : {std::tuple{1, 1, 1, 1, 2}, std::tuple{2, 7, 6, 2, 8}, std::tuple{1, 33, 4, 4, 64},
                                   std::tuple{1, 32769, 1, 1, 128}}) {
    SCOPED_TRACE(::testing::Message() << "RoPE B " << B << " T " << T << " NH " << NH << " NKV " << NKV << " hd " << hd);
    const size_t n = static_cast<size_t>(B) * T * (NH + 2 * NKV) * hd;
    std::vector<float> inv(static_cast<size_t>(hd / 2));
    kernels::rope_inv_freq(inv.data(), hd, 10000.f);
    const auto qkv0 = Random(n, 3);
    std::vector<float> fwd = qkv0, bwd = qkv0;
    cpu().RopeApply(fwd.data(), B, T, NH, NKV, hd, inv.data(), false);
    cpu().RopeApply(bwd.data(), B, T, NH, NKV, hd, inv.data(), true);
    Dev<float> eInv(be(), inv), eF(be(), qkv0), eB(be(), qkv0);
    be().RopeApply(eF.get(), B, T, NH, NKV, hd, eInv.get(), false);
    be().RopeApply(eB.get(), B, T, NH, NKV, hd, eInv.get(), true);
    ASSERT_TRUE(Ok());
    EXPECT_LE(RelErr(eF.Host(), fwd), kTol);
    EXPECT_LE(RelErr(eB.Host(), bwd), kTol);
  }
  // (F a multiple of 8: the 8-wide kernels on a GPU)
  for (auto [N, F] : {std::tuple{1, 1}, std::tuple{9, 13}, std::tuple{33, 300}, std::tuple{5, 8}, std::tuple{7, 136}}) {
    for (Precision p : {Precision::kFp32, Precision::kBf16}) {
      SCOPED_TRACE(::testing::Message() << "SwiGLU " << N << "x" << F << " " << kernels::PrecisionName(p));
      const auto gu32 = Random(static_cast<size_t>(N) * 2 * F, 5, 2.f), dh32 = Random(static_cast<size_t>(N) * F, 6);
      auto as = [&](const std::vector<float>& v) {  // the values of p (16-bit: rounded, stored 2 to a float)
        std::vector<float> out((v.size() * kernels::ElemBytes(p) + 3) / 4);
        cpu().Convert(Ptr(out.data(), p), v.data(), static_cast<int64_t>(v.size()));
        return out;
      };
      const auto gu = as(gu32), dh = as(dh32);
      std::vector<float> h((static_cast<size_t>(N) * F * kernels::ElemBytes(p) + 3) / 4),
          dgu((static_cast<size_t>(N) * 2 * F * kernels::ElemBytes(p) + 3) / 4);
      cpu().SwigluForward(Ptr(h.data(), p), CPtr(gu.data(), p), N, F);
      cpu().SwigluBackward(Ptr(dgu.data(), p), CPtr(dh.data(), p), CPtr(gu.data(), p), N, F);
      Dev<float> eGu(be(), gu), eDh(be(), dh), eH(be(), h.size()), eDgu(be(), dgu.size());
      be().SwigluForward(Ptr(eH.get(), p), CPtr(eGu.get(), p), N, F);
      be().SwigluBackward(Ptr(eDgu.get(), p), CPtr(eDh.get(), p), CPtr(eGu.get(), p), N, F);
      ASSERT_TRUE(Ok());
      auto widen = [&](const std::vector<float>& v, size_t count) {
        std::vector<float> out(count);
        cpu().Convert(out.data(), CPtr(v.data(), p), static_cast<int64_t>(count));
        return out;
      };
      const double tol = p == Precision::kFp32 ? kTol : 0x1p-8;  // bf16: within one ulp (2^-8 relative)
      EXPECT_LE(RelErr(widen(eH.Host(), static_cast<size_t>(N) * F), widen(h, static_cast<size_t>(N) * F)), tol);
      EXPECT_LE(RelErr(widen(eDgu.Host(), static_cast<size_t>(N) * 2 * F), widen(dgu, static_cast<size_t>(N) * 2 * F)),
                tol);
    }
  }
  for (auto [rows, NH, NKV, hd] : {std::tuple{1, 1, 1, 1}, std::tuple{10, 6, 2, 4}, std::tuple{7, 8, 1, 64}}) {
    for (Precision p : {Precision::kFp32, Precision::kBf16}) {
      SCOPED_TRACE(::testing::Message() << "GQA rows " << rows << " NH " << NH << " NKV " << NKV << " hd " << hd << " "
                                        << kernels::PrecisionName(p));
      const size_t narrow = static_cast<size_t>(rows) * (NH + 2 * NKV) * hd, wide = static_cast<size_t>(rows) * 3 * NH * hd;
      auto as = [&](const std::vector<float>& v) {
        std::vector<float> out((v.size() * kernels::ElemBytes(p) + 3) / 4);
        cpu().Convert(Ptr(out.data(), p), v.data(), static_cast<int64_t>(v.size()));
        return out;
      };
      const auto qkv = as(Random(narrow, 21)), d3 = as(Random(wide, 22));
      std::vector<float> x3(d3.size()), dq(qkv.size());
      cpu().GqaExpand(Ptr(x3.data(), p), CPtr(qkv.data(), p), rows, NH, NKV, hd);
      cpu().GqaReduce(Ptr(dq.data(), p), CPtr(d3.data(), p), rows, NH, NKV, hd);
      Dev<float> eQkv(be(), qkv), eD3(be(), d3), eX3(be(), x3.size()), eDq(be(), dq.size());
      be().GqaExpand(Ptr(eX3.get(), p), CPtr(eQkv.get(), p), rows, NH, NKV, hd);
      be().GqaReduce(Ptr(eDq.get(), p), CPtr(eD3.get(), p), rows, NH, NKV, hd);
      ASSERT_TRUE(Ok());
      auto values = [&](const std::vector<float>& v, size_t count) {  // the count values of p, as fp32
        std::vector<float> out(count);
        cpu().Convert(out.data(), CPtr(v.data(), p), static_cast<int64_t>(count));
        return out;
      };
      EXPECT_EQ(values(eX3.Host(), wide), values(x3, wide)) << "a copy: bit for bit";
      EXPECT_EQ(values(eDq.Host(), narrow), values(dq, narrow)) << "sums in the same order: bit for bit";
    }
  }
  std::vector<float> g(4);
  be().GqaExpand(Ptr(g.data(), Precision::kFp32), CPtr(g.data(), Precision::kFp32), 1, 6, 4, 1);
  const absl::Status groups = be().Synchronize();
  ASSERT_FALSE(groups.ok());
  EXPECT_NE(groups.message().find("GqaExpand: 6 query heads over 4"), absl::string_view::npos) << groups;
  // Mixed types are refused, naming the op.
  std::vector<float> a(4), b(4);
  be().SwigluForward(Ptr(a.data(), Precision::kBf16), CPtr(b.data(), Precision::kFp32), 1, 1);
  const absl::Status st = be().Synchronize();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("SwigluForward"), absl::string_view::npos) << st;
}

// The mixture-of-experts ops (kernels/moe.h): the router (softmax, top k, capacity, the
// losses), dispatch and combine, and each one's backward, on shapes with drops and without,
// k = 1, 2 and 4, one expert, tied logits (the lower index first), N k over the capacity
// kernels' chunks and over their scan's threads. Each op gets the cpu's inputs, so that each
// is compared alone.
// - The routing's integers (choice, slot, counts) are equal: the routing is exact.
// - Copies and sums of additions in the cpu's order (dispatch, its backward, dY = w dy) are bit
//   for bit.
// - The router's floats (probs, lse, weight, dlogits) are one thread's operations in the cpu's
//   order: the cpu's bits under the emulator; on a GPU expf and logf are within 2 ulp of glibc's
//   and nvcc may fuse a multiply-add, a few ulp of the largest value (2^-24 each): 1e-6.
//   So for the combine (k products summed in rank order, each fma-able) and the losses (double
//   sums in another order, rounded once to float: 1 ulp, plus the probabilities' few ulp).
// - dweight is a dot product over C summed in a block's tree order rather than the cpu's
//   sequential one: fp32 reordering of up to 257 terms, kTol.
TEST_F(BackendOpsTest, MoeOpsMatchTheCpuBackend) {
  constexpr double kRouterTol = 1e-6;
  enum Logits { kRandom, kTied, kAllEqual };
  struct Case {
    int N, E, k, capacity, C;
    Logits logits;
  };
  const Case cases[] = {
      {1, 1, 1, 1, 1, kRandom},          // one token, one expert
      {37, 1, 1, 5, 7, kRandom},         // one expert, 32 dropped
      {257, 8, 2, 65, 33, kRandom},      // capacity factor 1 (ceil(257 2 / 8)): drops
      {257, 8, 2, 257, 33, kRandom},     // dropless (capacity N)
      {300, 4, 1, 94, 257, kRandom},     // k = 1, capacity factor 1.25
      {1000, 64, 2, 32, 17, kTied},      // logits in steps of 1/2: ties
      {129, 6, 2, 20, 65, kAllEqual},    // every token picks experts 0, 1
      {1500, 40, 4, 10, 5, kRandom},     // k = 4, most dropped; E over a warp, not a power of 2
      {70001, 8, 4, 35001, 3, kTied},    // 1094 chunks of 256 > 1024 scan threads; router only
  };
  for (const Case& t : cases) {
    const int N = t.N, E = t.E, k = t.k, cap = t.capacity, C = t.C;
    SCOPED_TRACE(::testing::Message() << "N " << N << " E " << E << " k " << k << " capacity " << cap << " C " << C
                                      << " logits " << t.logits);
    const size_t NE = static_cast<size_t>(N) * E, Nk = static_cast<size_t>(N) * k, NC = static_cast<size_t>(N) * C;
    auto logits = Random(NE, 31, 2.f);
    for (float& l : logits) l = t.logits == kTied ? std::round(l * 2.f) / 2.f : t.logits == kAllEqual ? 0.25f : l;
    // The router.
    std::vector<float> probs(NE), lse(N), weight(Nk), stats(2);
    std::vector<int32_t> choice(Nk), slot(Nk), counts(MoeCountsSize(E));
    cpu().MoeRoute(probs.data(), lse.data(), choice.data(), weight.data(), slot.data(), counts.data(), stats.data(),
                   logits.data(), N, E, k, cap);
    ASSERT_TRUE(cpu().Synchronize().ok());
    const int rows = counts[static_cast<size_t>(2 * E)];
    ASSERT_GE(rows, 1);
    const std::vector<int32_t> poison_k(Nk, -7), poison_counts(counts.size(), -7);
    Dev<float> eLogits(be(), logits), eProbs(be(), NE), eLse(be(), N), eWeight(be(), Nk), eStats(be(), 2);
    Dev<int32_t> eChoice(be(), poison_k), eSlot(be(), poison_k), eCounts(be(), poison_counts);
    be().MoeRoute(eProbs.get(), eLse.get(), eChoice.get(), eWeight.get(), eSlot.get(), eCounts.get(), eStats.get(),
                  eLogits.get(), N, E, k, cap);
    ASSERT_TRUE(Ok());
    EXPECT_EQ(eChoice.Host(), choice);
    EXPECT_EQ(eSlot.Host(), slot);
    EXPECT_EQ(eCounts.Host(), counts);
    EXPECT_LE(RelErr(eProbs.Host(), probs), kRouterTol);
    EXPECT_LE(RelErr(eLse.Host(), lse), kRouterTol);
    EXPECT_LE(RelErr(eWeight.Host(), weight), kRouterTol);
    const auto got_stats = eStats.Host();
    for (int i = 0; i < 2; ++i) EXPECT_LE(std::fabs(got_stats[i] - stats[i]), kRouterTol * std::fabs(stats[i])) << i;
    // In place (probs == logits) as well.
    Dev<float> eInPlace(be(), logits);
    be().MoeRoute(eInPlace.get(), eLse.get(), eChoice.get(), eWeight.get(), eSlot.get(), eCounts.get(), eStats.get(),
                  eInPlace.get(), N, E, k, cap);
    ASSERT_TRUE(Ok());
    EXPECT_EQ(eSlot.Host(), slot);
    EXPECT_LE(RelErr(eInPlace.Host(), probs), kRouterTol);

    // Dispatch, combine and their backward, on the cpu's routing (one token a block: the
    // large case, there for the router's scan, adds nothing but the emulator's seconds).
    if (N > 10000) continue;
    const size_t RC = static_cast<size_t>(rows) * C;
    const auto x = Random(NC, 32), Y = Random(RC, 33), dy = Random(NC, 34), dX = Random(RC, 35), dx0 = Random(NC, 36);
    std::vector<float> X(RC), y(NC), dY(RC), dweight(Nk), dx = dx0, dlogits(NE);
    cpu().MoeDispatch(X.data(), x.data(), slot.data(), N, k, C);
    cpu().MoeCombine(y.data(), Y.data(), slot.data(), weight.data(), N, k, C);
    cpu().MoeCombineBackward(dY.data(), dweight.data(), dy.data(), Y.data(), slot.data(), weight.data(), N, k, C);
    cpu().MoeDispatchBackward(dx.data(), dX.data(), slot.data(), N, k, C);
    cpu().MoeRouterBackward(dlogits.data(), dweight.data(), probs.data(), lse.data(), choice.data(), weight.data(),
                            counts.data(), N, E, k, 0.5f, 0.25f);
    ASSERT_TRUE(cpu().Synchronize().ok());
    Dev<int32_t> cSlot(be(), slot), cChoice(be(), choice), cCounts(be(), counts);
    Dev<float> cWeight(be(), weight), cProbs(be(), probs), cLse(be(), lse), cDweight(be(), dweight), eX0(be(), x),
        eY0(be(), Y), eDy(be(), dy), eDX(be(), dX), eX(be(), RC), eY(be(), NC), eDY(be(), RC), eDw(be(), Nk),
        eDx(be(), dx0), eDl(be(), NE);
    be().MoeDispatch(eX.get(), eX0.get(), cSlot.get(), N, k, C);
    be().MoeCombine(eY.get(), eY0.get(), cSlot.get(), cWeight.get(), N, k, C);
    be().MoeCombineBackward(eDY.get(), eDw.get(), eDy.get(), eY0.get(), cSlot.get(), cWeight.get(), N, k, C);
    be().MoeDispatchBackward(eDx.get(), eDX.get(), cSlot.get(), N, k, C);
    be().MoeRouterBackward(eDl.get(), cDweight.get(), cProbs.get(), cLse.get(), cChoice.get(), cWeight.get(),
                           cCounts.get(), N, E, k, 0.5f, 0.25f);
    ASSERT_TRUE(Ok());
    EXPECT_EQ(eX.Host(), X) << "copies: bit for bit";
    EXPECT_EQ(eDY.Host(), dY) << "one product each: bit for bit";
    EXPECT_EQ(eDx.Host(), dx) << "sums in the cpu's order: bit for bit";
    EXPECT_LE(RelErr(eY.Host(), y), kRouterTol);
    EXPECT_LE(RelErr(eDw.Host(), dweight), kTol);
    EXPECT_LE(RelErr(eDl.Host(), dlogits), kRouterTol);
  }
  // Top 3 of 2 experts is refused, naming the op.
  be().MoeRoute(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 4, 2, 3, 4);
  const absl::Status st = be().Synchronize();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("MoeRoute: top 3 of 2 experts"), absl::string_view::npos) << st;
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
    options.attention = fused ? AttentionPath::kFused : AttentionPath::kReference;
    auto made = CreateBackend(*kind, 0, options);
    ASSERT_TRUE(made.ok()) << made.status();
    Backend& b = **made;
    ASSERT_EQ(b.Supports(Capability::kFusedAttention), fused);
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

// Host memory for transfers (AllocateHost: page-locked on the cuda kinds) and the copies that
// may return before they are done: on a second stream, down and back up, ordered by events,
// the bytes arrive; a device pointer is no host memory to free (cuda-emulated checks it).
TEST_F(BackendOpsTest, HostMemoryForTransfersAndAsynchronousCopiesKeepBytes) {
  for (Backend* b : {&be(), &cpu()}) {
    SCOPED_TRACE(b->Describe());
    EXPECT_EQ(b->Supports(Capability::kPinnedHost), b->kind() != kernels::BackendKind::kCpu)
        << "page-locked on the cuda kinds";
    const size_t n = 4099;
    const auto x = Random(n, 21);
    DeviceBuffer host, back;
    host.AssignHost(b, n);
    back.AssignHost(b, n);
    ASSERT_NE(host.data(), nullptr);
    EXPECT_EQ(std::vector<float>(host.data(), host.data() + n), std::vector<float>(n, 0.f)) << "zeroed";
    std::copy(x.begin(), x.end(), host.data());
    Dev<float> d(*b, n);
    Backend::Stream s = b->NewStream();
    Backend::Event up = b->NewEvent(), down = b->NewEvent();
    b->SetStream(s);
    b->CopyToDeviceAsync(d.get(), host.data(), n * sizeof(float));
    b->Record(up);
    b->SetStream(nullptr);
    b->Wait(up);
    b->Scale(d.get(), static_cast<int64_t>(n), 2.f);
    b->CopyToHostAsync(back.data(), d.get(), n * sizeof(float));
    b->Record(down);
    ASSERT_TRUE(b->SynchronizeEvent(down).ok());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(back.data()[i], 2 * x[i]) << i;
    b->FreeEvent(up);
    b->FreeEvent(down);
    b->FreeStream(s);
    ASSERT_TRUE(b->Synchronize().ok());
  }
  if (be().kind() == kernels::BackendKind::kCudaEmulated) {
    Dev<float> d(be(), 16);
    be().FreeHost(d.get());
    EXPECT_FALSE(be().Synchronize().ok()) << "freeing device memory as host memory is an error";
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
  EXPECT_TRUE(cpu().Supports(Capability::kHostAddressable));
  EXPECT_FALSE(be().Supports(Capability::kHostAddressable)) << be().Describe();
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


// ---- 16-bit tensors (kernels/types.h) ----
//
// Each typed op on the backend under test against the cpu backend's typed op on the same
// 16-bit inputs (values drawn in fp32 and rounded to the type), for bf16 and fp16. Two kinds of
// assertion, with the reason beside each:
//   bit for bit where the arithmetic is the same: Convert against the cpu backend; a 16-bit op
//     against the same backend's fp32 op on the widened inputs, rounded once (Convert) — the
//     contract's "bits of the fp32 op followed by RoundTo" — for LayerNorm, GELU, attention
//     (both paths), the classifier and dbias, whose 16-bit kernels are the fp32 ones with
//     loads widened and stores rounded;
//   within a derived bound across backends, where the fp32 values before the rounding come
//     from sums in another order (or exp/tanh written another way): if the fp32 values differ
//     by at most d, their roundings differ by at most d plus one unit in the last place of the
//     type at the larger magnitude (each rounding moves a value by at most half an ulp of its
//     result). d is the fp32 tests' bound for the op (kTol of the tensor's largest magnitude)
//     or, for GEMMs, the summation-order bound 3 (K + 1) 2^-24 sum_k |a_k b_k| (each backend's
//     fp32 sum of K products and a bias lies within (K + 1) u S of the exact value, u = 2^-24
//     for round-to-nearest additions and 2^-23 for an accumulator that truncates, as GPU
//     tensor cores may). A GEMM's outputs are also held to the exact values (NearExact), where
//     an output rounded other than to nearest shows.
// Outputs start poisoned (NaN bits 0xffff, a NaN in both 16-bit types), so that an element no
// thread writes fails.

constexpr Precision k16[] = {Precision::kBf16, Precision::kFp16};
constexpr uint16_t kPoison16 = 0xffff;
constexpr double kU = 0x1p-24;  // fp32's unit roundoff

// n values drawn as Random's, rounded to p.
std::vector<uint16_t> Random16(size_t n, uint64_t seed, Precision p, float scale = 1.f) {
  const auto x = Random(n, seed, scale);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = Of16(x[i], p);
  return h;
}
std::vector<float> Widen(const std::vector<uint16_t>& h, Precision p) {
  std::vector<float> x(h.size());
  for (size_t i = 0; i < h.size(); ++i) x[i] = FloatOf16(h[i], p);
  return x;
}
std::vector<uint16_t> Narrow(const std::vector<float>& x, Precision p) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = Of16(x[i], p);
  return h;
}
double MaxAbs(const std::vector<float>& x) {
  double m = 0;
  for (float v : x) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// The spacing of p's values in the binade of |x| (one unit in the last place): bf16 keeps 8
// significand bits down to 2^-126, fp16 11 down to 2^-14 (below: subnormals 2^-24 apart).
double Ulp(double x, Precision p) {
  const int bits = p == Precision::kBf16 ? 8 : 11, emin = p == Precision::kBf16 ? -126 : -14;
  int e = emin + 1;
  if (x != 0) std::frexp(std::fabs(x), &e);  // |x| = f 2^e, f in [0.5, 1)
  return std::ldexp(1.0, std::max(e - 1, emin) - (bits - 1));
}

// got and want hold the same bytes, element by element (else the count and the first that differ).
template <typename T>
::testing::AssertionResult SameBits(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0 && bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ, the first at " << first
                                       << ": " << +got[first] << " vs " << +want[first];
}

// Every element of got within bound(i) of want (NaN where want is NaN, and only there).
template <typename Bound>
::testing::AssertionResult Within(const std::vector<float>& got, const std::vector<float>& want, Bound bound) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  double worst = 0;  // the largest |got - want| / bound
  size_t at = 0, differ = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
    }
    if (std::isnan(want[i]) || got[i] == want[i]) continue;
    ++differ;
    const double r = std::fabs(static_cast<double>(got[i]) - want[i]) / bound(i);
    if (!(r <= worst)) worst = r, at = i;
  }
  if (worst <= 1) return ::testing::AssertionSuccess() << differ << " of " << got.size() << " differ, within bounds";
  return ::testing::AssertionFailure() << "element " << at << ": " << got[at] << " vs " << want[at] << " differ by "
                                       << std::fabs(static_cast<double>(got[at]) - want[at]) << ", " << worst
                                       << " times the bound " << bound(at) << " (" << differ << " of " << got.size()
                                       << " elements differ)";
}
// 16-bit got and want of type p: within one ulp of p at the larger magnitude plus d(i), the
// bound of the fp32 values they were rounded from.
template <typename D>
::testing::AssertionResult Within16(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, Precision p,
                                    D d) {
  const auto g = Widen(got, p), w = Widen(want, p);
  return Within(g, w, [&](size_t i) {
    return Ulp(std::max(std::fabs(static_cast<double>(g[i])), std::fabs(static_cast<double>(w[i]))), p) + d(i);
  });
}

// A GEMM's output (N, M) = sum over K of a(n, k) b(k, m) (+ c(n, m), one more term) in double:
// the exact values (the inputs are fp32 or 16-bit, whose products double holds exactly, and K
// is small) and S, the sum of the terms' magnitudes. One backend's fp32 sum lies within
// (K + 1) u_b S of the exact value (u_b = 2^-24 rounding to nearest, 2^-23 truncating, see
// above), so two backends' within 3 (K + 1) 2^-24 S of each other.
struct GemmRef {
  std::vector<double> exact, mag;
  int terms = 0;  // K + 1
  double Cross(size_t i) const { return 3.0 * terms * kU * mag[i]; }
  double ToExact(size_t i) const { return 2.0 * terms * kU * mag[i]; }
};
template <typename A, typename B, typename Cf>
GemmRef GemmOf(int N, int M, int K, A a, B b, Cf c) {
  GemmRef r{std::vector<double>(static_cast<size_t>(N) * M), std::vector<double>(static_cast<size_t>(N) * M), K + 1};
  for (int n = 0; n < N; ++n) {
    for (int m = 0; m < M; ++m) {
      double e = c(n, m), s = std::fabs(e);
      for (int k = 0; k < K; ++k) {
        const double t = static_cast<double>(a(n, k)) * b(k, m);
        e += t;
        s += std::fabs(t);
      }
      r.exact[static_cast<size_t>(n) * M + m] = e;
      r.mag[static_cast<size_t>(n) * M + m] = s;
    }
  }
  return r;
}
auto Cross(const GemmRef& r) {
  return [&r](size_t i) { return r.Cross(i); };
}

// A 16-bit GEMM's weight or bias gradient accumulated, a0 + round_p(s) (r: the sums s, without
// a0). Across backends: the sums' bound, one ulp of p at the gradient's size (the roundings)
// and one of fp32 at the total's (the additions, half an ulp each).
auto AccCross(const GemmRef& r, const std::vector<float>& a0, Precision p) {
  return [&r, &a0, p](size_t i) {
    const double g = std::fabs(r.exact[i]) + r.Cross(i);
    return r.Cross(i) + Ulp(g, p) + 2 * kU * (std::fabs(a0[i]) + g);
  };
}
// Against the exact sum e: ToExact, half an ulp of p and half of fp32.
::testing::AssertionResult NearExactAccumulated(const std::vector<float>& got, const GemmRef& r,
                                                const std::vector<float>& a0, Precision p) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = std::fabs(r.exact[i]) + r.ToExact(i);
    const double err = std::fabs(got[i] - (a0[i] + r.exact[i]));
    const double bound = r.ToExact(i) + Ulp(g, p) / 2 + kU * (std::fabs(a0[i]) + g);
    if (!(err <= bound)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << a0[i] << " + the exact "
                                           << r.exact[i] << ", off by " << err << " > " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

// One backend's GEMM output (fp32, or 16-bit of type p) against the exact values: within
// ToExact, and for a 16-bit output half an ulp more (rounded to nearest). An output rounded
// another way (truncated: up to a whole ulp) fails here, where the cross-backend bound of one
// ulp cannot tell.
::testing::AssertionResult NearExact(const std::vector<float>& got, const GemmRef& r, Precision p) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double half_ulp = p == Precision::kFp32 ? 0 : Ulp(got[i], p) / 2;
    const double err = std::fabs(got[i] - r.exact[i]), bound = r.ToExact(i) + half_ulp;
    if (!(err <= bound)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs the exact " << r.exact[i]
                                           << ", off by " << err << " > " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}

// A 16-bit GEMM output whose bias cuBLASLt's epilogue added (kernels/cuda/matmul.cu, as an
// H200's cuBLAS 13 was measured to): the product rounded to p, then the bias added and rounded
// again. Against the exact value e = product + bias: ToExact, half an ulp of p at the
// product's size (the first rounding) and half at the output's (the second). bias(i): the bias
// element i adds.
template <typename Bias>
::testing::AssertionResult NearExactRoundedTwice(const std::vector<float>& got, const GemmRef& r, Bias bias,
                                                 Precision p) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double product = std::fabs(r.exact[i] - bias(i)) + r.ToExact(i);
    const double err = std::fabs(got[i] - r.exact[i]);
    const double bound = r.ToExact(i) + Ulp(product, p) / 2 + Ulp(got[i], p) / 2;
    if (!(err <= bound)) {
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs the exact " << r.exact[i]
                                           << " (bias " << bias(i) << "), off by " << err << " > " << bound;
    }
  }
  return ::testing::AssertionSuccess();
}
// The cross-backend bound of such an output against the cpu's rounded once: Cross, and half an
// ulp at the product's size beyond Within16's one ulp.
template <typename Bias>
auto CrossRoundedTwice(const GemmRef& r, Bias bias, Precision p) {
  return [&r, bias, p](size_t i) {
    return r.Cross(i) + Ulp(std::fabs(r.exact[i] - bias(i)) + r.Cross(i), p) / 2;
  };
}

// Every pair of fp32, bf16 and fp16, on every 16-bit pattern and on fp32 values around every
// rounding boundary (the midpoints between neighbouring 16-bit values: ties, and one fp32 ulp
// either side), the fp16 overflow edge, subnormals and NaNs with payloads.
TEST_F(BackendOpsTest, ConvertBetweenEveryPairOfTypesMatchesTheCpuBackendBitForBit) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> f32 = Random(4099, 31, 1000.f);
  auto bits = [](uint32_t u) {
    float x;
    std::memcpy(&x, &u, sizeof(x));
    return x;
  };
  for (float e : {65504.f, 65519.996f, 65520.f, -65520.f, 70000.f, 0x1p-14f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-25f,
                  0x1p-26f, 1e-9f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-11f, 3.4028235e38f, INFINITY,
                  -INFINITY, 0.f, -0.0f, 1e-40f, bits(0x7f800001u), bits(0xffc00001u), bits(0x7fbfffffu)}) {
    f32.push_back(e);
  }
  for (Precision p : k16) {  // around each boundary between neighbouring positive finite values of p
    for (uint32_t h = 0; h < 0x7f80u; ++h) {
      const float lo = FloatOf16(static_cast<uint16_t>(h), p), hi = FloatOf16(static_cast<uint16_t>(h + 1), p);
      if (!std::isfinite(hi)) break;
      const float mid = lo + (hi - lo) / 2;  // exact: a 16-bit value's half ulp is an fp32 value
      f32.insert(f32.end(), {mid, -mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY)});
    }
  }
  for (Precision from : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    for (Precision to : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
      SCOPED_TRACE(::testing::Message() << PrecisionName(from) << " to " << PrecisionName(to));
      const int64_t n = from == Precision::kFp32 ? static_cast<int64_t>(f32.size()) : static_cast<int64_t>(all.size());
      const void* host_in = from == Precision::kFp32 ? static_cast<const void*>(f32.data()) : all.data();
      const size_t in_bytes = static_cast<size_t>(n) * ElemBytes(from), out_bytes = static_cast<size_t>(n) * ElemBytes(to);
      std::vector<uint8_t> want(out_bytes), got(out_bytes, 0xff);
      cpu().Convert(Ptr(want.data(), to), CPtr(host_in, from), n);
      void* in = be().Allocate(in_bytes);
      void* out = be().Allocate(out_bytes);
      be().CopyToDevice(in, host_in, in_bytes);
      be().CopyToDevice(out, got.data(), out_bytes);
      be().Convert(Ptr(out, to), CPtr(in, from), n);
      ASSERT_TRUE(Ok());
      be().CopyToHost(got.data(), out, out_bytes);
      EXPECT_TRUE(SameBits(got, want)) << "kernels/cast.h's rounding, bit for bit";
      be().Convert(Ptr(in, from), CPtr(in, from), n);  // the same type in place: nothing to do
      ASSERT_TRUE(Ok());
      std::vector<uint8_t> kept(in_bytes), host_bytes(in_bytes);
      std::memcpy(host_bytes.data(), host_in, in_bytes);
      be().CopyToHost(kept.data(), in, in_bytes);
      EXPECT_TRUE(SameBits(kept, host_bytes)) << "in place, same type";
      be().Free(in);
      be().Free(out);
    }
  }
}

TEST_F(BackendOpsTest, LayerNormWithA16BitOutputIsTheFp32OneRounded) {
  for (Precision p : k16) {
    for (auto [N, C] : {std::tuple{1, 1}, std::tuple{14, 33}, std::tuple{16, 100}, std::tuple{18, 257},
                        std::tuple{3, 1025}}) {
      SCOPED_TRACE(::testing::Message() << PrecisionName(p) << " " << N << "x" << C);
      const size_t n = static_cast<size_t>(N) * C;
      const auto x = Random(n, 7, 2.f), w = Random(C, 8), bias = Random(C, 9);
      std::vector<float> out32(n), mean(N), rstd(N), mean16(N), rstd16(N);
      std::vector<uint16_t> out16(n);
      cpu().LayerNormForward(out32.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C);
      cpu().LayerNormForward(Ptr(out16.data(), p), mean16.data(), rstd16.data(), x.data(), w.data(), bias.data(), N, C);
      Dev<float> eX(be(), x), eW(be(), w), eB(be(), bias), eOut32(be(), n), eMean(be(), N), eRstd(be(), N),
          eMean16(be(), N), eRstd16(be(), N);
      Dev<uint16_t> eOut16(be(), std::vector<uint16_t>(n, kPoison16));
      be().LayerNormForward(eOut32.get(), eMean.get(), eRstd.get(), eX.get(), eW.get(), eB.get(), N, C);
      be().LayerNormForward(Ptr(eOut16.get(), p), eMean16.get(), eRstd16.get(), eX.get(), eW.get(), eB.get(), N, C);
      ASSERT_TRUE(Ok());
      const auto got16 = eOut16.Host();
      const auto got32 = eOut32.Host();
      // The same kernel with the store rounded: the backend's fp32 output, rounded once.
      EXPECT_TRUE(SameBits(got16, Narrow(got32, p)));
      EXPECT_TRUE(SameBits(eMean16.Host(), eMean.Host())) << "the statistics do not depend on the output's type";
      EXPECT_TRUE(SameBits(eRstd16.Host(), eRstd.Host()));
      // Across backends the fp32 outputs differ by at most the fp32 test's kTol of the largest
      // (sums of the mean and variance in another order); rounded, by that plus one ulp.
      const double d = kTol * MaxAbs(out32);
      EXPECT_TRUE(Within16(got16, out16, p, [&](size_t) { return d; }));
      EXPECT_LE(RelErr(eMean16.Host(), mean16), kTol);
      EXPECT_LE(RelErr(eRstd16.Host(), rstd16), kTol);
    }
  }
}

TEST_F(BackendOpsTest, GeluIn16BitsIsTheFp32OneRounded) {
  for (Precision p : k16) {
    for (int64_t n : {1, 7, 257, 4099}) {
      SCOPED_TRACE(::testing::Message() << PrecisionName(p) << " " << n);
      const auto x = Random16(n, 1, p, 3.f), dout = Random16(n, 4, p);
      const auto xw = Widen(x, p), dw = Widen(dout, p);
      std::vector<uint16_t> out(n), dx(n);
      std::vector<float> out32(n), dx32(n);
      cpu().GeluForward(Ptr(out.data(), p), CPtr(x.data(), p), n);
      cpu().GeluBackward(Ptr(dx.data(), p), CPtr(x.data(), p), CPtr(dout.data(), p), n);
      cpu().GeluForward(out32.data(), xw.data(), n);
      cpu().GeluBackward(dx32.data(), xw.data(), dw.data(), n);
      Dev<uint16_t> eX(be(), x), eD(be(), dout), eOut(be(), std::vector<uint16_t>(n, kPoison16)),
          eDx(be(), std::vector<uint16_t>(n, kPoison16)), eInPlace(be(), x), eDInPlace(be(), dout);
      Dev<float> eXw(be(), xw), eDw(be(), dw), eOut32(be(), n), eDx32(be(), n);
      be().GeluForward(Ptr(eOut.get(), p), CPtr(eX.get(), p), n);
      be().GeluBackward(Ptr(eDx.get(), p), CPtr(eX.get(), p), CPtr(eD.get(), p), n);
      be().GeluForward(Ptr(eInPlace.get(), p), CPtr(eInPlace.get(), p), n);  // out == inp
      be().GeluBackward(Ptr(eDInPlace.get(), p), CPtr(eX.get(), p), CPtr(eDInPlace.get(), p), n);  // dinp == dout
      be().GeluForward(eOut32.get(), eXw.get(), n);
      be().GeluBackward(eDx32.get(), eXw.get(), eDw.get(), n);
      ASSERT_TRUE(Ok());
      const auto got = eOut.Host(), gotd = eDx.Host();
      // fp32 inside, one rounding: the backend's fp32 GELU on the widened values, rounded.
      EXPECT_TRUE(SameBits(got, Narrow(eOut32.Host(), p)));
      EXPECT_TRUE(SameBits(gotd, Narrow(eDx32.Host(), p)));
      EXPECT_TRUE(SameBits(eInPlace.Host(), got)) << "in place";
      EXPECT_TRUE(SameBits(eDInPlace.Host(), gotd)) << "in place";
      // Across backends: tanh is the CPU's polynomial (kernels/cpu/vec_math.h) and the GPU's
      // tanhf, whose fp32 results the fp32 test holds within kTol of the largest; rounded,
      // within that and one ulp.
      const double d = kTol * MaxAbs(out32), dd = kTol * MaxAbs(dx32);
      EXPECT_TRUE(Within16(got, out, p, [&](size_t) { return d; }));
      EXPECT_TRUE(Within16(gotd, dx, p, [&](size_t) { return dd; }));
    }
  }
}

// A backend of the tested kind whose 16-bit GEMM outputs with a bias take cuBLASLt's bias
// epilogue, or not.
absl::StatusOr<std::unique_ptr<Backend>> WithBiasEpilogue(bool epilogue) {
  BackendOptions options;
  options.bias_epilogue = epilogue;
  return CreateBackend(*ParseBackendKind(GANTRY_TEST_BACKEND), 0, options);
}

// MatmulForward and MatmulBackward with 16-bit inputs in both layouts, with and without bias,
// outputs (out, dinp) fp32 and 16-bit; dweight and dbias fp32, accumulated.
TEST_F(BackendOpsTest, MatmulsOf16BitInputsMatchTheCpuBackend) {
  // Both ways of a 16-bit output with a bias: one rounding through the fp32 scratch (the
  // default) and cuBLASLt's bias epilogue (BackendOptions::bias_epilogue: two roundings).
  for (bool epilogue : {false, true}) {
    auto made = WithBiasEpilogue(epilogue);
    ASSERT_TRUE(made.ok()) << made.status();
    Backend& bk = **made;
    SCOPED_TRACE(epilogue ? "bias epilogue" : "one rounding");
    for (Precision p : k16) {
      for (auto [N, C, OC] : {std::tuple{1, 1, 1}, std::tuple{7, 33, 65}, std::tuple{64, 64, 64},
                              std::tuple{37, 100, 13}, std::tuple{130, 17, 257}}) {
        for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
          for (bool with_bias : {true, false}) {
            SCOPED_TRACE(::testing::Message() << PrecisionName(p) << " " << N << "x" << C << "x" << OC
                                              << (layout == WeightLayout::kOutIn ? " OutIn" : " InOut")
                                              << (with_bias ? " bias" : ""));
            const bool outin = layout == WeightLayout::kOutIn;
            const size_t nx = static_cast<size_t>(N) * C, nw = static_cast<size_t>(C) * OC, no = static_cast<size_t>(N) * OC;
            const auto x = Random16(nx, 1, p), w = Random16(nw, 2, p), b = Random16(OC, 3, p),
                       dout = Random16(no, 4, p);
            const auto dw0 = Random(nw, 5), db0 = Random(OC, 6);
            const auto xf = Widen(x, p), wf = Widen(w, p), bf = Widen(b, p), df = Widen(dout, p);
            auto W = [&](int c, int o) { return wf[outin ? static_cast<size_t>(o) * C + c : static_cast<size_t>(c) * OC + o]; };
            const CPtr bias_c = with_bias ? CPtr(b.data(), p) : nullptr;
            // The cpu backend: out fp32 and 16-bit; dinp fp32 and 16-bit (dweight, dbias once).
            std::vector<float> out32(no), dinp32(nx), dw = dw0, db = db0;
            std::vector<uint16_t> out16(no), dinp16(nx);
            cpu().MatmulForward(out32.data(), CPtr(x.data(), p), CPtr(w.data(), p), bias_c, N, C, OC, layout);
            cpu().MatmulForward(Ptr(out16.data(), p), CPtr(x.data(), p), CPtr(w.data(), p), bias_c, N, C, OC, layout);
            cpu().MatmulBackward(dinp32.data(), dw.data(), with_bias ? db.data() : nullptr, CPtr(dout.data(), p),
                                 CPtr(x.data(), p), CPtr(w.data(), p), N, C, OC, layout);
            std::vector<float> dw_unused = dw0;
            cpu().MatmulBackward(Ptr(dinp16.data(), p), dw_unused.data(), nullptr, CPtr(dout.data(), p),
                                 CPtr(x.data(), p), CPtr(w.data(), p), N, C, OC, layout);
            Dev<uint16_t> eX(bk, x), eW(bk, w), eB(bk, b), eDout(bk, dout),
                eOut16(bk, std::vector<uint16_t>(no, kPoison16)), eDinp16(bk, std::vector<uint16_t>(nx, kPoison16));
            Dev<float> eOut32(bk, no), eDinp32(bk, nx), eDw(bk, dw0), eDb(bk, db0), eDw2(bk, dw0),
                eDfw(bk, df), eDbw(bk, std::vector<float>(OC, 0.f)), eDinpW(bk, nx), eDwW(bk, dw0),
                eXw(bk, xf), eWw(bk, wf);
            const CPtr bias_e = with_bias ? CPtr(eB.get(), p) : nullptr;
            bk.MatmulForward(eOut32.get(), CPtr(eX.get(), p), CPtr(eW.get(), p), bias_e, N, C, OC, layout);
            bk.MatmulForward(Ptr(eOut16.get(), p), CPtr(eX.get(), p), CPtr(eW.get(), p), bias_e, N, C, OC, layout);
            bk.MatmulBackward(eDinp32.get(), eDw.get(), with_bias ? eDb.get() : nullptr, CPtr(eDout.get(), p),
                                CPtr(eX.get(), p), CPtr(eW.get(), p), N, C, OC, layout);
            bk.MatmulBackward(Ptr(eDinp16.get(), p), eDw2.get(), nullptr, CPtr(eDout.get(), p), CPtr(eX.get(), p),
                                CPtr(eW.get(), p), N, C, OC, layout);
            // Into zeros, the gradients themselves: each a value of p (rounded, not fp32 sums).
            Dev<float> eDwZero(bk, std::vector<float>(nw, 0.f)), eDbZero(bk, std::vector<float>(OC, 0.f));
            bk.MatmulBackward(nullptr, eDwZero.get(), eDbZero.get(), CPtr(eDout.get(), p), CPtr(eX.get(), p),
                                CPtr(eW.get(), p), N, C, OC, layout);
            std::vector<float> cpu_dw_zero(nw, 0.f), cpu_db_zero(OC, 0.f);
            cpu().MatmulBackward(nullptr, cpu_dw_zero.data(), cpu_db_zero.data(), CPtr(dout.data(), p), CPtr(x.data(), p),
                                 CPtr(w.data(), p), N, C, OC, layout);
            // The fp32 op on the widened values, for dbias: the same column sums, in the same order
            // (into zeros: the sums themselves).
            bk.MatmulBackward(eDinpW.get(), eDwW.get(), with_bias ? eDbw.get() : nullptr, eDfw.get(), eXw.get(),
                                eWw.get(), N, C, OC, layout);
            ASSERT_TRUE(Ok());
            // out (N, OC) = sum over C of x w (+ bias); dinp (N, C) = sum over OC of dout w;
            // dweight += round(sum over N of x dout); dbias += round(sum over N of dout): this
            // call's weight and bias gradients are 16-bit tensors, accumulated in fp32.
            const auto out_ref = GemmOf(
                N, OC, C, [&](int n, int c) { return xf[static_cast<size_t>(n) * C + c]; }, W,
                [&](int, int o) { return with_bias ? bf[o] : 0.f; });
            const auto dinp_ref = GemmOf(
                N, C, OC, [&](int n, int o) { return df[static_cast<size_t>(n) * OC + o]; },
                [&](int o, int c) { return W(c, o); }, [](int, int) { return 0.f; });
            const auto dw_ref = GemmOf(
                outin ? OC : C, outin ? C : OC, N,
                [&](int r, int n) {
                  return outin ? df[static_cast<size_t>(n) * OC + r] : xf[static_cast<size_t>(n) * C + r];
                },
                [&](int n, int c) {
                  return outin ? xf[static_cast<size_t>(n) * C + c] : df[static_cast<size_t>(n) * OC + c];
                },
                [](int, int) { return 0.f; });
            const auto db_ref = GemmOf(
                1, OC, N, [](int, int) { return 1.f; }, [&](int n, int o) { return df[static_cast<size_t>(n) * OC + o]; },
                [](int, int) { return 0.f; });
            auto acc_cross = [&](const GemmRef& r, const std::vector<float>& a0) { return AccCross(r, a0, p); };
            auto near_acc = [&](const std::vector<float>& got, const GemmRef& r, const std::vector<float>& a0) {
              return NearExactAccumulated(got, r, a0, p);
            };
            const auto got_out32 = eOut32.Host(), got_dinp32 = eDinp32.Host();
            const auto got_out16 = eOut16.Host(), got_dinp16 = eDinp16.Host();
            EXPECT_TRUE(Within(got_out32, out32, Cross(out_ref))) << "out fp32: the summation-order bound";
            auto bias_of = [&](size_t i) { return with_bias ? static_cast<double>(bf[i % OC]) : 0.0; };
            if (with_bias && epilogue) {  // cuBLASLt's bias epilogue: the product rounded, then the sum
              EXPECT_TRUE(Within16(got_out16, out16, p, CrossRoundedTwice(out_ref, bias_of, p)))
                  << "out 16-bit: that, one ulp, and half of the product's";
            } else {
              EXPECT_TRUE(Within16(got_out16, out16, p, Cross(out_ref))) << "out 16-bit: that and one ulp";
            }
            EXPECT_TRUE(Within(got_dinp32, dinp32, Cross(dinp_ref))) << "dinp fp32";
            EXPECT_TRUE(Within16(got_dinp16, dinp16, p, Cross(dinp_ref))) << "dinp 16-bit";
            EXPECT_TRUE(Within(eDw.Host(), dw, acc_cross(dw_ref, dw0))) << "dweight += round";
            EXPECT_TRUE(Within(eDw2.Host(), dw, acc_cross(dw_ref, dw0))) << "dweight += round (the call with a 16-bit dinp)";
            EXPECT_TRUE(near_acc(eDw.Host(), dw_ref, dw0)) << "dweight: its gradient rounded to nearest";
            EXPECT_TRUE(near_acc(dw, dw_ref, dw0)) << "the cpu's dweight: its gradient rounded to nearest";
            for (const auto& [what, g] : {std::pair{"dweight", eDwZero.Host()}, std::pair{"dbias", eDbZero.Host()},
                                          std::pair{"cpu dweight", cpu_dw_zero}, std::pair{"cpu dbias", cpu_db_zero}}) {
              EXPECT_TRUE(SameBits(g, Widen(Narrow(g, p), p))) << what << ": this call's gradient is a 16-bit value";
            }
            EXPECT_TRUE(NearExact(got_out32, out_ref, Precision::kFp32));
            if (with_bias && epilogue) {
              EXPECT_TRUE(NearExactRoundedTwice(Widen(got_out16, p), out_ref, bias_of, p))
                  << "the product rounded to nearest, then the sum";
            } else {
              EXPECT_TRUE(NearExact(Widen(got_out16, p), out_ref, p)) << "rounded to nearest";
            }
            EXPECT_TRUE(NearExact(got_dinp32, dinp_ref, Precision::kFp32));
            EXPECT_TRUE(NearExact(Widen(got_dinp16, p), dinp_ref, p)) << "rounded to nearest";
            if (with_bias) {
              EXPECT_TRUE(Within(eDb.Host(), db, acc_cross(db_ref, db0))) << "dbias += round";
              std::vector<float> db_want = db0;
              const auto sums = eDbw.Host();
              for (int o = 0; o < OC; ++o) db_want[o] += FloatOf16(Of16(sums[o], p), p);
              EXPECT_TRUE(SameBits(eDb.Host(), db_want)) << "dbias: the fp32 column sums of the widened dout, rounded";
            } else {
              EXPECT_TRUE(SameBits(eDb.Host(), db0)) << "untouched without a bias";
            }
          }
        }
      }
    }
  }
}

// The MLP's fused GELU in 16 bits: forward, pre rounded and gelu of the rounded pre rounded;
// backward through the GELU, dinp (fp32 or 16-bit: rounded before and after the product)
// times gelu'(gelu_pre).
TEST_F(BackendOpsTest, TheFusedGeluMatmulsIn16BitsMatchTheCpuBackend) {
  // Both ways of a 16-bit output with a bias: one rounding through the fp32 scratch (the
  // default) and cuBLASLt's bias epilogue (BackendOptions::bias_epilogue: two roundings).
  for (bool epilogue : {false, true}) {
    auto made = WithBiasEpilogue(epilogue);
    ASSERT_TRUE(made.ok()) << made.status();
    Backend& bk = **made;
    SCOPED_TRACE(epilogue ? "bias epilogue" : "one rounding");
    for (Precision p : k16) {
      for (auto [N, C, OC] : {std::tuple{1, 1, 1}, std::tuple{7, 33, 65}, std::tuple{64, 64, 256},
                              std::tuple{37, 100, 13}, std::tuple{5, 257, 31}}) {
        SCOPED_TRACE(::testing::Message() << PrecisionName(p) << " " << N << "x" << C << "x" << OC);
        const size_t nx = static_cast<size_t>(N) * C, no = static_cast<size_t>(N) * OC;
        const auto x = Random16(nx, 1, p), w = Random16(static_cast<size_t>(C) * OC, 2, p), b = Random16(OC, 3, p);
        const auto xf = Widen(x, p), wf = Widen(w, p), bf = Widen(b, p);
        std::vector<uint16_t> pre(no), out(no);
        cpu().MatmulBiasGeluForward(Ptr(pre.data(), p), Ptr(out.data(), p), CPtr(x.data(), p), CPtr(w.data(), p),
                                    CPtr(b.data(), p), N, C, OC);
        Dev<uint16_t> eX(bk, x), eW(bk, w), eB(bk, b), ePre(bk, std::vector<uint16_t>(no, kPoison16)),
            eOut(bk, std::vector<uint16_t>(no, kPoison16)), eGelu(bk, std::vector<uint16_t>(no, kPoison16)),
            eGeluOfCpuPre(bk, std::vector<uint16_t>(no, kPoison16)), eCpuPre(bk, pre);
        bk.MatmulBiasGeluForward(Ptr(ePre.get(), p), Ptr(eOut.get(), p), CPtr(eX.get(), p), CPtr(eW.get(), p),
                                   CPtr(eB.get(), p), N, C, OC);
        ASSERT_TRUE(Ok());
        bk.GeluForward(Ptr(eGelu.get(), p), CPtr(ePre.get(), p), static_cast<int64_t>(no));
        bk.GeluForward(Ptr(eGeluOfCpuPre.get(), p), CPtr(eCpuPre.get(), p), static_cast<int64_t>(no));
        ASSERT_TRUE(Ok());
        const auto got_pre = ePre.Host(), got_out = eOut.Host();
        const auto pre_ref = GemmOf(
            N, OC, C, [&](int n, int c) { return xf[static_cast<size_t>(n) * C + c]; },
            [&](int c, int o) { return wf[static_cast<size_t>(c) * OC + o]; }, [&](int, int o) { return bf[o]; });
        auto bias_of = [&](size_t i) { return static_cast<double>(bf[i % OC]); };
        if (epilogue) {  // cuBLASLt's bias epilogue: the product rounded, then the sum
          EXPECT_TRUE(Within16(got_pre, pre, p, CrossRoundedTwice(pre_ref, bias_of, p))) << "pre: a GEMM's bound";
          EXPECT_TRUE(NearExactRoundedTwice(Widen(got_pre, p), pre_ref, bias_of, p))
              << "pre: the product rounded to nearest, then the sum";
        } else {
          EXPECT_TRUE(Within16(got_pre, pre, p, Cross(pre_ref))) << "pre: a GEMM's bound";
          EXPECT_TRUE(NearExact(Widen(got_pre, p), pre_ref, p)) << "pre: rounded to nearest, once";
        }
        // Not cuBLASLt's GELU epilogue on the unrounded sums: the backend's 16-bit GELU of its
        // rounded pre, bit for bit.
        EXPECT_TRUE(SameBits(got_out, eGelu.Host()));
        // Against the cpu: where pre agrees, GELU's own cross-backend bound (the fp32 test's kTol);
        // where it differs, also |gelu'| <= 1.13 times the difference of the pre values.
        const auto pre_b = Widen(got_pre, p), pre_c = Widen(pre, p);
        const double d = kTol * MaxAbs(Widen(out, p));
        EXPECT_TRUE(Within16(got_out, out, p, [&](size_t i) { return d + 1.13 * std::fabs(pre_b[i] - pre_c[i]); }));

        // The next matmul's backward through the GELU: (N, OC) → (N, C) with weight (OC, C),
        // gelu_pre (N, OC).
        const auto gpre = Random16(no, 6, p, 2.f), w2 = Random16(static_cast<size_t>(OC) * C, 7, p),
                   dout = Random16(nx, 4, p);
        const auto dw0 = Random(static_cast<size_t>(OC) * C, 5);
        const auto gpref = Widen(gpre, p), w2f = Widen(w2, p), doutf = Widen(dout, p);
        std::vector<float> dinp32(no), dinp32_plain(no), dw = dw0, scratch_dw = dw0, g_cpu(no);
        std::vector<uint16_t> dinp16(no), dinp16_plain(no);
        const CPtr dout_c(dout.data(), p), out_c(out.data(), p), w2_c(w2.data(), p), gpre_c(gpre.data(), p);
        cpu().MatmulBackward(dinp32.data(), dw.data(), nullptr, dout_c, out_c, w2_c, N, OC, C, WeightLayout::kInOut,
                             gpre_c);
        cpu().MatmulBackward(Ptr(dinp16.data(), p), scratch_dw.data(), nullptr, dout_c, out_c, w2_c, N, OC, C,
                             WeightLayout::kInOut, gpre_c);
        cpu().MatmulBackward(dinp32_plain.data(), scratch_dw.data(), nullptr, dout_c, out_c, w2_c, N, OC, C);
        cpu().MatmulBackward(Ptr(dinp16_plain.data(), p), scratch_dw.data(), nullptr, dout_c, out_c, w2_c, N, OC, C);
        const std::vector<float> ones(no, 1.f);
        cpu().GeluBackward(g_cpu.data(), gpref.data(), ones.data(), static_cast<int64_t>(no));  // the cpu's gelu'
        Dev<uint16_t> eGpre(bk, gpre), eW2(bk, w2), eDout(bk, dout), eOutC(bk, out),
            eDinp16(bk, std::vector<uint16_t>(no, kPoison16)), eDinp16Plain(bk, std::vector<uint16_t>(no, kPoison16)),
            eDinp16Gelu(bk, std::vector<uint16_t>(no, kPoison16));
        Dev<float> eDinp32(bk, no), eDinp32Plain(bk, no), eDinp32Gelu(bk, no), eDw(bk, dw0),
            eScratchDw(bk, dw0), eGpref(bk, gpref), eOnes(bk, ones), eG(bk, no);
        const CPtr dout_e(eDout.get(), p), out_e(eOutC.get(), p), w2_e(eW2.get(), p), gpre_e(eGpre.get(), p);
        bk.MatmulBackward(eDinp32.get(), eDw.get(), nullptr, dout_e, out_e, w2_e, N, OC, C, WeightLayout::kInOut,
                            gpre_e);
        bk.MatmulBackward(Ptr(eDinp16.get(), p), eScratchDw.get(), nullptr, dout_e, out_e, w2_e, N, OC, C,
                            WeightLayout::kInOut, gpre_e);
        bk.MatmulBackward(eDinp32Plain.get(), eScratchDw.get(), nullptr, dout_e, out_e, w2_e, N, OC, C);
        bk.MatmulBackward(Ptr(eDinp16Plain.get(), p), eScratchDw.get(), nullptr, dout_e, out_e, w2_e, N, OC, C);
        bk.GeluBackward(eG.get(), eGpref.get(), eOnes.get(), static_cast<int64_t>(no));  // the backend's gelu'
        ASSERT_TRUE(Ok());
        // On the backend, the product with gelu' is its GELU backward's, bit for bit: of the
        // fp32 dinp (fp32), and of the rounded dinp (16-bit, then rounded again).
        Dev<float> eGelu32In(bk, eDinp32Plain.Host());
        bk.GeluBackward(eDinp32Gelu.get(), eGpref.get(), eGelu32In.get(), static_cast<int64_t>(no));
        bk.GeluBackward(Ptr(eDinp16Gelu.get(), p), gpre_e, CPtr(eDinp16Plain.get(), p), static_cast<int64_t>(no));
        ASSERT_TRUE(Ok());
        const auto got32 = eDinp32.Host();
        const auto got16 = eDinp16.Host();
        EXPECT_TRUE(SameBits(got32, eDinp32Gelu.Host()));
        EXPECT_TRUE(SameBits(got16, eDinp16Gelu.Host()));
        // Against the cpu, from the arithmetic: with g the two backends' gelu' (measured above by
        // their fp32 GELU backward with dout 1) and d their dinp before the product,
        // |g_b d_b - g_c d_c| <= |g_b| |d_b - d_c| + |d_c| |g_b - g_c|, plus the products'
        // fp32 roundings, u (|g_b d_b| + |g_c d_c|); 16-bit: d the rounded dinp, and one ulp for
        // the final rounding. |d_b - d_c| is the GEMM's (checked against its bound above for
        // the plain call; here measured).
        const auto g_b = eG.Host();
        const auto p32_b = eDinp32Plain.Host(), p16_b = Widen(eDinp16Plain.Host(), p), p16_c = Widen(dinp16_plain, p);
        auto product_bound = [&](const std::vector<float>& d_b, const std::vector<float>& d_c) {
          return [&, d_b, d_c](size_t i) {
            const double gb = g_b[i], gc = g_cpu[i], db = d_b[i], dc = d_c[i];
            return std::fabs(gb) * std::fabs(db - dc) + std::fabs(dc) * std::fabs(gb - gc) +
                   kU * (std::fabs(gb * db) + std::fabs(gc * dc));
          };
        };
        EXPECT_TRUE(Within(got32, dinp32, product_bound(p32_b, dinp32_plain))) << "dinp fp32 times gelu'";
        EXPECT_TRUE(Within16(got16, dinp16, p, product_bound(p16_b, p16_c))) << "dinp 16-bit times gelu'";
        const auto outf = Widen(out, p);
        const auto dw_ref = GemmOf(
            OC, C, N, [&](int o, int n) { return outf[static_cast<size_t>(n) * OC + o]; },
            [&](int n, int c) { return doutf[static_cast<size_t>(n) * C + c]; }, [](int, int) { return 0.f; });
        EXPECT_TRUE(Within(eDw.Host(), dw, AccCross(dw_ref, dw0, p))) << "dweight += round";
        EXPECT_TRUE(NearExactAccumulated(eDw.Host(), dw_ref, dw0, p)) << "dweight: its gradient rounded to nearest";
      }
    }
  }
}

// A backend of the tested kind with cuBLASLt's GELU and bias-gradient epilogues
// (BackendOptions::gelu_epilogue), or not.
absl::StatusOr<std::unique_ptr<Backend>> WithGeluEpilogue(bool epilogue) {
  BackendOptions options;
  options.gelu_epilogue = epilogue;
  // A call the GELU epilogue does not take rounds its biased output once, as the epilogue does
  // (the bias epilogue, the default, rounds twice: MatmulsOf16BitInputsMatchTheCpuBackend).
  options.bias_epilogue = false;
  return CreateBackend(*ParseBackendKind(GANTRY_TEST_BACKEND), 0, options);
}

// The cublasLtMatmul calls with epilogue e that the emulated cuBLASLt has run: on cuda-emulated,
// which path a call took; elsewhere (a real GPU's cuBLASLt counts nothing) the checks of it
// are skipped.
bool CountsEpilogues() { return *ParseBackendKind(GANTRY_TEST_BACKEND) == BackendKind::kCudaEmulated; }
uint64_t EpilogueRuns(emucuda::cublasLtEpilogue_t e) { return emucuda::LtMatmulsRun(e); }

// GELU (tanh form) and its derivative in double: the value an fp32 evaluation approximates.
double GeluOf(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double GeluGradOf(double x) {
  const double th = std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
}

// MatmulBackward's gelu_dbias is the column sums of the dinp it makes, as the dbias of a call
// whose dout is that dinp takes them (the model's fc bias, summed in the call before): the same
// bits on the cpu and on the backend's default path, fp32 and 16-bit; without gelu_pre it is
// refused.
TEST_F(BackendOpsTest, GeluDbiasIsTheNextCallsDbias) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    for (Backend* bk : {&cpu(), &be()}) {
      SCOPED_TRACE(::testing::Message() << PrecisionName(p) << " " << bk->Describe());
      const int N = 37, C = 48, OC = 20, X = 3;  // dinp (N, C) from dout (N, OC); the next call's inp (N, X)
      auto values = [&](size_t n, uint64_t seed, float scale = 1.f) {
        std::vector<uint16_t> h = Random16(n, seed, p, scale);
        std::vector<float> f = Random(n, seed, scale);
        return std::pair{h, f};
      };
      const auto [dout16, dout32] = values(static_cast<size_t>(N) * OC, 1);
      const auto [inp16, inp32] = values(static_cast<size_t>(N) * C, 2);
      const auto [w16, w32] = values(static_cast<size_t>(C) * OC, 3);
      const auto [pre16, pre32] = values(static_cast<size_t>(N) * C, 4, 2.f);
      const auto [x16, x32] = values(static_cast<size_t>(N) * X, 5);
      const auto [wx16, wx32] = values(static_cast<size_t>(X) * C, 6);
      const bool half = p != Precision::kFp32;
      // Device copies of whichever type p is (16-bit as uint16_t, fp32 as float).
      Dev<uint16_t> hDout(*bk, dout16), hInp(*bk, inp16), hW(*bk, w16), hPre(*bk, pre16), hX(*bk, x16),
          hWx(*bk, wx16), hDinp(*bk, std::vector<uint16_t>(static_cast<size_t>(N) * C, kPoison16));
      Dev<float> fDout(*bk, dout32), fInp(*bk, inp32), fW(*bk, w32), fPre(*bk, pre32), fX(*bk, x32), fWx(*bk, wx32),
          fDinp(*bk, static_cast<size_t>(N) * C);
      auto P = [&](Dev<uint16_t>& h, Dev<float>& f) { return half ? Ptr(h.get(), p) : Ptr(f.get()); };
      const auto db0 = Random(C, 7);
      Dev<float> dw(*bk, Random(static_cast<size_t>(C) * OC, 8)), gdb(*bk, db0), dwx(*bk, static_cast<size_t>(X) * C),
          want(*bk, db0);
      const Ptr dinp = P(hDinp, fDinp);
      bk->MatmulBackward(dinp, dw.get(), nullptr, P(hDout, fDout), P(hInp, fInp), P(hW, fW), N, C, OC,
                         WeightLayout::kInOut, P(hPre, fPre), gdb.get());
      bk->MatmulBackward(nullptr, dwx.get(), want.get(), dinp, P(hX, fX), P(hWx, fWx), N, X, C);
      ASSERT_TRUE(bk->Synchronize().ok());
      EXPECT_TRUE(SameBits(gdb.Host(), want.Host()));
      EXPECT_FALSE(SameBits(gdb.Host(), db0)) << "summed into";
      bk->MatmulBackward(dinp, dw.get(), nullptr, P(hDout, fDout), P(hInp, fInp), P(hW, fW), N, C, OC,
                         WeightLayout::kInOut, nullptr, gdb.get());
      const absl::Status st = bk->Synchronize();
      EXPECT_FALSE(st.ok());
      EXPECT_NE(st.message().find("gelu_dbias needs dinp and gelu_pre"), absl::string_view::npos) << st;
    }
  }
}

// cuBLASLt's GELU and bias-gradient epilogues (BackendOptions::gelu_epilogue), against the cpu
// backend: the fused forward (GELU_AUX_BIAS), the backward through the GELU with the bias
// gradient of the layer before it (DGELU_BGRAD), and the weight-gradient GEMM's bias gradient
// in both layouts (BGRADA for kInOut, where dout is the GEMM's A; BGRADB for kOutIn). OC not a
// multiple of 8 (the aux's leading dimension) takes the default path, with the same results'
// bounds. On cuda-emulated, the emulated cuBLASLt's counts say which path each call took.
TEST_F(BackendOpsTest, TheGeluAndBiasGradEpiloguesMatchTheCpuBackend) {
  auto made = WithGeluEpilogue(true);
  ASSERT_TRUE(made.ok()) << made.status();
  Backend& bk = **made;
  using emucuda::CUBLASLT_EPILOGUE_BGRADA;
  using emucuda::CUBLASLT_EPILOGUE_BGRADB;
  using emucuda::CUBLASLT_EPILOGUE_DGELU_BGRAD;
  using emucuda::CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kFp16}) {
    for (auto [N, C, OC] : {std::tuple{64, 64, 256}, std::tuple{7, 33, 64}, std::tuple{37, 100, 13},
                            std::tuple{130, 17, 24}}) {
      SCOPED_TRACE(::testing::Message() << PrecisionName(p) << " " << N << "x" << C << "x" << OC);
      const bool half = p != Precision::kFp32, fused_gelu = OC % 8 == 0;
      const size_t nx = static_cast<size_t>(N) * C, no = static_cast<size_t>(N) * OC, nw = static_cast<size_t>(C) * OC;
      // Inputs of type p (16-bit ones as their bits; fp32 ones as floats), and their values.
      auto draw = [&](size_t n, uint64_t seed, float scale = 1.f) {
        return half ? Widen(Random16(n, seed, p, scale), p) : Random(n, seed, scale);
      };
      const auto xf = draw(nx, 1), wf = draw(nw, 2), bf = draw(OC, 3), gpref = draw(no, 6, 2.f),
                 w2f = draw(nw, 7), doutf = draw(nx, 4), dout2f = draw(no, 9);
      const auto dw0 = Random(nw, 5), db0 = Random(OC, 10), gdb0 = Random(OC, 11);
      // A tensor of p on a backend, from values of p.
      struct Tensor {
        std::unique_ptr<Dev<uint16_t>> h;
        std::unique_ptr<Dev<float>> f;
        Precision p;
        Ptr ptr() const { return h ? Ptr(h->get(), p) : Ptr(f->get()); }
        std::vector<float> Host() const { return h ? Widen(h->Host(), p) : f->Host(); }
      };
      auto put = [&](Backend& b, const std::vector<float>& v) {
        Tensor t{nullptr, nullptr, p};
        if (half) t.h = std::make_unique<Dev<uint16_t>>(b, Narrow(v, p));
        else t.f = std::make_unique<Dev<float>>(b, v);
        return t;
      };
      auto out_of = [&](Backend& b, size_t n) {
        return put(b, std::vector<float>(n, NAN));
      };
      const uint64_t runs0[4] = {EpilogueRuns(CUBLASLT_EPILOGUE_GELU_AUX_BIAS), EpilogueRuns(CUBLASLT_EPILOGUE_DGELU_BGRAD),
                                 EpilogueRuns(CUBLASLT_EPILOGUE_BGRADA), EpilogueRuns(CUBLASLT_EPILOGUE_BGRADB)};
      // Both backends: the forward; the backward of the next matmul through the GELU (weight
      // w2 (OC, C), dinp (N, OC)) with gelu_dbias; the fc matmul's weight and bias gradients in
      // both layouts (dout2 (N, OC)).
      struct Got {
        std::vector<float> pre, out, dinp, dw2, gdb, dw[2], db[2], dbz[2];
      };
      auto run = [&](Backend& b) {
        Got g;
        Tensor x = put(b, xf), w = put(b, wf), bias = put(b, bf), gpre = put(b, gpref), w2 = put(b, w2f),
          dout = put(b, doutf), dout2 = put(b, dout2f), pre = out_of(b, no), out = out_of(b, no),
          dinp = out_of(b, no);
        Dev<float> dw2(b, Random(nw, 12)), gdb(b, gdb0);
        b.MatmulBiasGeluForward(pre.ptr(), out.ptr(), x.ptr(), w.ptr(), bias.ptr(), N, C, OC);
        b.MatmulBackward(dinp.ptr(), dw2.get(), nullptr, dout.ptr(), out.ptr(), w2.ptr(), N, OC, C,
                         WeightLayout::kInOut, gpre.ptr(), gdb.get());
        g.pre = pre.Host(), g.out = out.Host(), g.dinp = dinp.Host(), g.dw2 = dw2.Host(), g.gdb = gdb.Host();
        for (int l = 0; l < 2; ++l) {
          const WeightLayout layout = l == 0 ? WeightLayout::kInOut : WeightLayout::kOutIn;
          Dev<float> dw(b, dw0), db(b, db0), dwz(b, std::vector<float>(nw, 0.f)), dbz(b, std::vector<float>(OC, 0.f));
          b.MatmulBackward(nullptr, dw.get(), db.get(), dout2.ptr(), x.ptr(), w.ptr(), N, C, OC, layout);
          b.MatmulBackward(nullptr, dwz.get(), dbz.get(), dout2.ptr(), x.ptr(), w.ptr(), N, C, OC, layout);
          g.dw[l] = dw.Host(), g.db[l] = db.Host(), g.dbz[l] = dbz.Host();
        }
        EXPECT_TRUE(b.Synchronize().ok());
        return g;
      };
      const Got c = run(cpu());
      const Got e = run(bk);
      if (CountsEpilogues()) {
        EXPECT_EQ(EpilogueRuns(CUBLASLT_EPILOGUE_GELU_AUX_BIAS) - runs0[0], fused_gelu ? 1u : 0u) << "the forward";
        EXPECT_EQ(EpilogueRuns(CUBLASLT_EPILOGUE_DGELU_BGRAD) - runs0[1], fused_gelu ? 1u : 0u) << "dinp through the GELU";
        EXPECT_EQ(EpilogueRuns(CUBLASLT_EPILOGUE_BGRADA) - runs0[2], 2u) << "kInOut's dbias (two calls)";
        EXPECT_EQ(EpilogueRuns(CUBLASLT_EPILOGUE_BGRADB) - runs0[3], 2u) << "kOutIn's dbias (two calls)";
      }
      const auto pre_ref = GemmOf(
          N, OC, C, [&](int n, int k) { return xf[static_cast<size_t>(n) * C + k]; },
          [&](int k, int o) { return wf[static_cast<size_t>(k) * OC + o]; }, [&](int, int o) { return bf[o]; });
      const auto dinp_ref = GemmOf(
          N, OC, C, [&](int n, int k) { return doutf[static_cast<size_t>(n) * C + k]; },
          [&](int k, int o) { return w2f[static_cast<size_t>(o) * C + k]; }, [](int, int) { return 0.f; });
      const auto db_ref = GemmOf(
          1, OC, N, [](int, int) { return 1.f; }, [&](int n, int o) { return dout2f[static_cast<size_t>(n) * OC + o]; },
          [](int, int) { return 0.f; });
      if (!half) {  // fp32: the issue's fp32 bound, as the fp32 matmuls' tests
        for (const auto& [what, got, want] :
             {std::tuple{"pre", e.pre, c.pre}, std::tuple{"out", e.out, c.out}, std::tuple{"dinp", e.dinp, c.dinp},
              std::tuple{"dweight through the GELU", e.dw2, c.dw2}, std::tuple{"gelu_dbias", e.gdb, c.gdb},
              std::tuple{"dweight kInOut", e.dw[0], c.dw[0]}, std::tuple{"dbias kInOut", e.db[0], c.db[0]},
              std::tuple{"dweight kOutIn", e.dw[1], c.dw[1]}, std::tuple{"dbias kOutIn", e.db[1], c.db[1]}}) {
          EXPECT_LE(RelErr(got, want), kTol) << what;
        }
        continue;
      }
      // 16-bit. pre: rounded once from the fp32 sum on both paths: a GEMM's bound.
      EXPECT_TRUE(Within(e.pre, c.pre, [&](size_t i) {
        return Ulp(std::max(std::fabs(e.pre[i]), std::fabs(c.pre[i])), p) + pre_ref.Cross(i);
      })) << "pre";
      EXPECT_TRUE(NearExact(e.pre, pre_ref, p)) << "pre: rounded to nearest, once";
      // out. The cpu: gelu of its rounded pre p_c, rounded; the epilogue: gelu of the unrounded
      // fp32 sum x_b, rounded. |x_b - p_c| <= Cross + half an ulp of p_c, times |gelu'| <= 1.13;
      // the two fp32 GELUs within kTol of the largest output (GELU's own cross-backend bound);
      // one ulp for the two final roundings (Within's).
      const double gelu_tol = kTol * MaxAbs(c.out);
      EXPECT_TRUE(Within(e.out, c.out, [&](size_t i) {
        return Ulp(std::max(std::fabs(e.out[i]), std::fabs(c.out[i])), p) + gelu_tol +
               1.13 * (pre_ref.Cross(i) + Ulp(c.pre[i], p) / 2);
      })) << "out";
      // The epilogue's one rounding (where it ran): against gelu of the exact sum e, within
      // 1.13 ToExact (the fp32 sum), GELU's fp32 error and half an ulp of out. The default path
      // rounds pre first: up to 1.13 times half an ulp of pre more, which this does not allow.
      if (fused_gelu) {
        for (size_t i = 0; i < no; ++i) {
          const double want = GeluOf(pre_ref.exact[i]);
          const double bound = 1.13 * pre_ref.ToExact(i) + gelu_tol + Ulp(e.out[i], p) / 2;
          ASSERT_LE(std::fabs(e.out[i] - want), bound) << "out " << i << ": gelu of the unrounded sum, rounded once";
        }
      }
      // dinp. The cpu: d_c = round(g_c round(a_c)); the epilogue: round(g_b a_b), with a the fp32
      // GEMM sums and g the fp32 gelu' of the stored pre, within kTol of the exact g (|g| <= 1.13,
      // a few fp32 ulps). |g_b a_b - g_c round(a_c)| <= (|g| + kTol) (|a_b - a_c| + half an ulp
      // of a_c) + |a_c| 2 kTol + the products' fp32 roundings 2 u (|g| + kTol) |a|; |a_b - a_c|
      // <= Cross; and one ulp for the two final roundings.
      std::vector<double> g(no), amag(no), dbound(no);
      for (size_t i = 0; i < no; ++i) {
        g[i] = std::fabs(GeluGradOf(gpref[i]));
        amag[i] = std::fabs(dinp_ref.exact[i]) + dinp_ref.Cross(i);
        dbound[i] = (g[i] + kTol) * (dinp_ref.Cross(i) + Ulp(amag[i], p) / 2) + amag[i] * 2 * kTol +
                    2 * kU * (g[i] + kTol) * amag[i];
      }
      EXPECT_TRUE(Within(e.dinp, c.dinp, [&](size_t i) {
        return Ulp(std::max(std::fabs(e.dinp[i]), std::fabs(c.dinp[i])), p) + dbound[i];
      })) << "dinp";
      if (fused_gelu) {  // one rounding: the default path's rounded a_c is up to |g| half an ulp more
        for (size_t i = 0; i < no; ++i) {
          const double want = GeluGradOf(gpref[i]) * dinp_ref.exact[i];
          const double bound = (g[i] + kTol) * dinp_ref.ToExact(i) + amag[i] * kTol + kU * (g[i] + kTol) * amag[i] +
                               Ulp(e.dinp[i], p) / 2;
          ASSERT_LE(std::fabs(e.dinp[i] - want), bound) << "dinp " << i << ": gelu' times the unrounded sum, rounded once";
        }
      }
      // gelu_dbias += round(the fp32 column sums of dinp): the cpu's of its rounded dinp, the
      // epilogue's of the unrounded fp32 products. Per column: the rows' differences (dbound and
      // an ulp of dinp's size each), both fp32 sums' reordering (N u the sum of magnitudes each),
      // an ulp of the sum's size for the two roundings to p, and the fp32 additions to gdb0.
      for (int o = 0; o < OC; ++o) {
        double diff = 0, mag = 0;
        for (int n = 0; n < N; ++n) {
          const size_t i = static_cast<size_t>(n) * OC + o;
          const double m = (g[i] + kTol) * amag[i] + dbound[i];
          diff += dbound[i] + Ulp(m, p) / 2;  // the cpu's rounding of d_c, at most half an ulp at m >= |d_c|
          mag += m;
        }
        const double sum = mag + diff;
        const double bound = diff + 2 * N * kU * sum + Ulp(sum, p) + 2 * kU * (std::fabs(gdb0[o]) + sum);
        EXPECT_LE(std::fabs(e.gdb[o] - c.gdb[o]), bound) << "gelu_dbias " << o;
      }
      // The weight-gradient GEMM with the bias gradient: the same 16-bit gradients the cpu
      // accumulates (the sums of dout's 16-bit values in fp32, each rounded once, then added).
      for (int l = 0; l < 2; ++l) {
        SCOPED_TRACE(l == 0 ? "kInOut" : "kOutIn");
        EXPECT_TRUE(Within(e.db[l], c.db[l], AccCross(db_ref, db0, p))) << "dbias += round";
        EXPECT_TRUE(NearExactAccumulated(e.db[l], db_ref, db0, p)) << "dbias: its gradient rounded to nearest";
        EXPECT_TRUE(SameBits(e.dbz[l], Widen(Narrow(e.dbz[l], p), p))) << "dbias: this call's gradient is a 16-bit value";
        const bool outin = l == 1;
        const auto dw_ref = GemmOf(
            outin ? OC : C, outin ? C : OC, N,
            [&](int r, int n) {
              return outin ? dout2f[static_cast<size_t>(n) * OC + r] : xf[static_cast<size_t>(n) * C + r];
            },
            [&](int n, int k) {
              return outin ? xf[static_cast<size_t>(n) * C + k] : dout2f[static_cast<size_t>(n) * OC + k];
            },
            [](int, int) { return 0.f; });
        EXPECT_TRUE(Within(e.dw[l], c.dw[l], AccCross(dw_ref, dw0, p))) << "dweight += round";
      }
    }
  }
}

// What the fused kernels compute differently from the cpu's attention beyond fp32 rounding,
// per element of out (B,T,C) and of dqkv (B,T,3C), to add to the cross-backend bounds:
//  - weights rounded to p (mixed precision): flash attention rounds exp(s - m) against the
//    running max m of the keys seen so far and rescales as m grows, the cpu against the row's
//    final max; each is within half an ulp (2^-s relative, s the type's significand bits) of
//    the same value, so the two weights differ by E_ij <= 2^(1-s) P_ij (+ 2^-24 for fp16's
//    subnormal weights). Its backward recomputes the weights unrounded from the log-sum-exp
//    where the cpu differentiates the rounded probabilities it stored: again within E_ij.
//  - the backward's row term D_i = dout_i . out_i from the 16-bit out it is given, where the
//    cpu's is the fp32 sum_j P_ij dout_i . v_j: they differ by dD_i <= sum_d |dout_id|
//    |out16_id - out_id| (plus the fp32 outs' own kTol difference).
// Through out_i = sum_j p_ij v_j, ds_ij = p_ij (dout_i . v_j - D_i), dq_i = scale sum_j ds_ij
// k_j, dk_j = scale sum_i ds_ij q_i and dv_j = sum_i p_ij dout_i:
//   out_i: sum_j E_ij |v_j|       dq_i: scale sum_j (E_ij |dp_ij - D_i| + P_ij dD_i) |k_j|
//   dv_j: sum_i E_ij |dout_i|     dk_j: scale sum_i (E_ij |dp_ij - D_i| + P_ij dD_i) |q_i|
// P: the cpu's probabilities (att), out32 its fp32 output on the widened qkv.
struct FusedExtra {
  std::vector<double> out, dqkv;
};
// ds_rel: where the backward rounds ds_ij to the 16-bit type before the products with k and q
// (cuDNN's tensor cores take 16-bit operands; the fused kernels keep it fp32): each ds_ij is
// then also within ds_rel |ds_ij| (the type's unit roundoff, 2^-s) of its fp32 value, and
// within 2^-25 more for fp16's subnormals: |ds_ij| <= P_ij |dp_ij - D_i| adds ds_rel P_ij
// |dp_ij - D_i| (+ 2^-25) to the ds term of dq_i and dk_j.
FusedExtra FusedAttentionExtra(const std::vector<float>& qkv, const std::vector<float>& dout,
                               const std::vector<float>& out16, const std::vector<float>& out32,
                               const std::vector<float>& att, int B, int T, int C, int NH, Precision weights,
                               double ds_rel = 0) {
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  const double rel = weights == Precision::kFp32 ? 0 : weights == Precision::kBf16 ? 0x1p-7 : 0x1p-10;
  const double abs_w = weights == Precision::kFp16 ? 0x1p-24 : 0;
  const double ds_abs = ds_rel > 0 && weights == Precision::kFp16 ? 0x1p-25 : 0;
  const double out_slack = kTol * MaxAbs(out32);
  FusedExtra x{std::vector<double>(out32.size()), std::vector<double>(qkv.size())};
  auto q = [&](int b, int t, int part, int h) { return &qkv[(static_cast<size_t>(b) * T + t) * 3 * C + part * C + h * hs]; };
  auto row = [&](const std::vector<float>& v, int b, int t, int h) { return &v[(static_cast<size_t>(b) * T + t) * C + h * hs]; };
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* P = &att[(static_cast<size_t>(b) * NH + h) * T * T];
      std::vector<double> dD(T), D(T);
      for (int i = 0; i < T; ++i) {
        const float *g = row(dout, b, i, h), *o16 = row(out16, b, i, h), *o = row(out32, b, i, h);
        for (int d = 0; d < hs; ++d) {
          dD[i] += std::fabs(static_cast<double>(g[d])) * (std::fabs(static_cast<double>(o16[d]) - o[d]) + out_slack);
          D[i] += static_cast<double>(g[d]) * o[d];
        }
      }
      for (int i = 0; i < T; ++i) {
        for (int j = 0; j <= i; ++j) {
          const double p = P[static_cast<size_t>(i) * T + j], E = rel * p + (rel > 0 ? abs_w : 0);
          const float *gi = row(dout, b, i, h), *vj = q(b, j, 2, h), *kj = q(b, j, 1, h), *qi = q(b, i, 0, h);
          double dp = 0;
          for (int d = 0; d < hs; ++d) dp += static_cast<double>(gi[d]) * vj[d];
          const double ds = E * std::fabs(dp - D[i]) + p * dD[i] + ds_rel * p * std::fabs(dp - D[i]) + ds_abs;
          double* xo = &x.out[(static_cast<size_t>(b) * T + i) * C + h * hs];
          double* xq = &x.dqkv[(static_cast<size_t>(b) * T + i) * 3 * C + h * hs];
          double* xk = &x.dqkv[(static_cast<size_t>(b) * T + j) * 3 * C + C + h * hs];
          double* xv = &x.dqkv[(static_cast<size_t>(b) * T + j) * 3 * C + 2 * C + h * hs];
          for (int d = 0; d < hs; ++d) {
            xo[d] += E * std::fabs(vj[d]);
            xq[d] += scale * ds * std::fabs(kj[d]);
            xk[d] += scale * ds * std::fabs(qi[d]);
            xv[d] += E * std::fabs(gi[d]);
          }
        }
      }
    }
  }
  return x;
}

// Attention with 16-bit qkv, out, dout and dqkv, both paths (fused: flash kernels; unfused:
// cuBLAS batched GEMMs over fp32 probabilities), with the softmax weights unrounded (kFp32) and
// rounded to the tensors' type (as a mixed-precision model calls it).
TEST_F(BackendOpsTest, AttentionIn16BitsBothWaysMatchesTheCpuBackend) {
  for (bool fused : {true, false}) {
    BackendOptions options;
    options.attention = fused ? AttentionPath::kFused : AttentionPath::kReference;
    auto made = CreateBackend(*ParseBackendKind(GANTRY_TEST_BACKEND), 0, options);
    ASSERT_TRUE(made.ok()) << made.status();
    Backend& b = **made;
    for (Precision p : k16) {
      for (Precision weights : {Precision::kFp32, p}) {
        for (auto [B, T, C, NH] : {std::tuple{1, 1, 1, 1}, std::tuple{2, 7, 16, 2}, std::tuple{1, 33, 33, 3},
                                   std::tuple{2, 17, 64, 4}, std::tuple{1, 65, 32, 1}}) {
          SCOPED_TRACE(::testing::Message() << (fused ? "fused " : "unfused ") << PrecisionName(p) << " weights "
                                            << PrecisionName(weights) << " " << B << "x" << T << "x" << C << " NH "
                                            << NH);
          const size_t n_qkv = static_cast<size_t>(B) * T * 3 * C, n_out = static_cast<size_t>(B) * T * C,
                       n_att = static_cast<size_t>(B) * NH * T * T, n_lse = static_cast<size_t>(B) * NH * T,
                       n_state = fused ? n_lse : n_att;
          const auto qkv = Random16(n_qkv, 1, p), dout = Random16(n_out, 2, p);
          const auto qkvf = Widen(qkv, p), doutf = Widen(dout, p);
          // The cpu backend, 16-bit and (for the bounds' scale) fp32 on the widened values.
          std::vector<uint16_t> out(n_out), dqkv(n_qkv);
          std::vector<float> att(n_att), scratch(n_att), out32(n_out), att32(n_att), dqkv32(n_qkv);
          cpu().AttentionForward(Ptr(out.data(), p), att.data(), CPtr(qkv.data(), p), B, T, C, NH, weights);
          cpu().AttentionBackward(Ptr(dqkv.data(), p), scratch.data(), CPtr(dout.data(), p), CPtr(qkv.data(), p),
                                  CPtr(out.data(), p), att.data(), B, T, C, NH);
          cpu().AttentionForward(out32.data(), att32.data(), qkvf.data(), B, T, C, NH, weights);
          cpu().AttentionBackward(dqkv32.data(), scratch.data(), doutf.data(), qkvf.data(), out32.data(), att32.data(),
                                  B, T, C, NH);
          // The backend: 16-bit, and fp32 on the widened values (the backward given the widened
          // 16-bit out, which the fused backward reads).
          Dev<uint16_t> eQkv(b, qkv), eDout(b, dout), eOut(b, std::vector<uint16_t>(n_out, kPoison16)),
              eDqkv(b, std::vector<uint16_t>(n_qkv, kPoison16));
          Dev<float> eState(b, n_state), eScratch(b, n_att), eQkvW(b, qkvf), eDoutW(b, doutf), eOut32(b, n_out),
              eState32(b, n_state), eDqkv32(b, n_qkv);
          b.AttentionForward(Ptr(eOut.get(), p), eState.get(), CPtr(eQkv.get(), p), B, T, C, NH, weights);
          b.AttentionBackward(Ptr(eDqkv.get(), p), eScratch.get(), CPtr(eDout.get(), p), CPtr(eQkv.get(), p),
                              CPtr(eOut.get(), p), eState.get(), B, T, C, NH);
          b.AttentionForward(eOut32.get(), eState32.get(), eQkvW.get(), B, T, C, NH, weights);
          ASSERT_TRUE(b.Synchronize().ok());
          const auto got_out = eOut.Host();
          Dev<float> eOutW(b, Widen(got_out, p));
          b.AttentionBackward(eDqkv32.get(), eScratch.get(), eDoutW.get(), eQkvW.get(), eOutW.get(), eState.get(), B, T,
                              C, NH);
          const absl::Status st = b.Synchronize();
          ASSERT_TRUE(st.ok()) << st;
          const auto got_dqkv = eDqkv.Host();
          // The same kernels (and GEMMs) on values widened as they are loaded, stores rounded:
          // the fp32 op's bits, rounded once.
          EXPECT_TRUE(SameBits(got_out, Narrow(eOut32.Host(), p)));
          EXPECT_TRUE(SameBits(eState.Host(), eState32.Host())) << (fused ? "lse" : "probabilities") << ", fp32";
          EXPECT_TRUE(SameBits(got_dqkv, Narrow(eDqkv32.Host(), p)));
          // Across backends: the fp32 attention test's kTol of the largest and one ulp; the fused
          // kernels also what FusedAttentionExtra derives (the unfused path computes as the cpu).
          const double d_out = kTol * MaxAbs(out32), d_dqkv = kTol * MaxAbs(dqkv32);
          const FusedExtra extra =
              fused ? FusedAttentionExtra(qkvf, doutf, Widen(got_out, p), out32, att32, B, T, C, NH, weights)
                    : FusedExtra{std::vector<double>(n_out), std::vector<double>(n_qkv)};
          EXPECT_TRUE(Within16(got_out, out, p, [&](size_t i) { return d_out + extra.out[i]; }));
          EXPECT_TRUE(Within16(got_dqkv, dqkv, p, [&](size_t i) { return d_dqkv + extra.dqkv[i]; }));
        }
      }
    }
  }
}

// Two runs of a 16-bit attention's forward and backward on b, each on fresh device copies of
// qkv and dout (poisoned outputs): each run's out, dqkv and statistics. call(out, lse, dqkv, qkv,
// dout) issues the two calls.
struct AttentionRuns {
  std::vector<uint16_t> out[2], dqkv[2];
  std::vector<float> lse[2];
  bool ok = false;  // both ran (else the backend's error is reported)
};
AttentionRuns RunTwice(Backend& b, Precision p, const std::vector<uint16_t>& qkv, const std::vector<uint16_t>& dout,
                       size_t n_lse, const std::function<void(Ptr, float*, Ptr, CPtr, CPtr)>& call) {
  AttentionRuns r;
  for (int run = 0; run < 2; ++run) {
    Dev<uint16_t> eQkv(b, qkv), eDout(b, dout), eOut(b, std::vector<uint16_t>(dout.size(), kPoison16)),
        eDqkv(b, std::vector<uint16_t>(qkv.size(), kPoison16));
    Dev<float> eLse(b, n_lse);
    call(Ptr(eOut.get(), p), eLse.get(), Ptr(eDqkv.get(), p), CPtr(eQkv.get(), p), CPtr(eDout.get(), p));
    const absl::Status st = b.Synchronize();
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) return r;
    r.out[run] = eOut.Host();
    r.dqkv[run] = eDqkv.Host();
    r.lse[run] = eLse.Host();
  }
  EXPECT_TRUE(SameBits(r.out[1], r.out[0])) << "forward, run to run";
  EXPECT_TRUE(SameBits(r.lse[1], r.lse[0])) << "statistics, run to run";
  EXPECT_TRUE(SameBits(r.dqkv[1], r.dqkv[0])) << "the deterministic backward, run to run";
  r.ok = true;
  return r;
}

// cuDNN's fused attention, the tensor-core path of 16-bit calls (kernels/cuda/cudnn_attention.h;
// on cuda-emulated the stand-in of kernels/emulated/cudnn_frontend.h), against the cpu
// backend's 16-bit attention. It cannot give the fp32 kernels' bits rounded: its scores and
// products run on tensor cores (16-bit operands, exact products, fp32 sums in its own order),
// and its backward rounds ds to 16 bits. The bound, per element, from the type's unit
// roundoff u (2^-8 bf16, 2^-11 fp16) and the reduction lengths (T keys, hs channels):
//  - fp32 sums of up to T + hs exact products in any order: within kTol of the largest
//    output, as the fp32 kernels across backends (the cross-backend slack d_out, d_dqkv);
//  - the softmax weights rounded to 16 bits against a running maximum, where the cpu rounds
//    against the row's final one: FusedAttentionExtra's E_ij <= 2u P_ij, carried through
//    out_i = sum_j p_ij v_j, dv_j = sum_i p_ij dout_i and the ds terms of dq and dk;
//  - the backward's D_i = dout_i . out_i from the 16-bit out it is given (the dD term);
//  - ds rounded to 16 bits: ds_rel = u (FusedAttentionExtra's ds_rel);
//  - each output rounded once: one ulp (Within16).
// The log-sum-exp (cuDNN's softmax statistics, fp32) within kTol (1 + |lse|) of the cpu's.
// And the deterministic backward: a second run gives the same bits, forward and backward.
TEST_F(BackendOpsTest, CudnnAttentionIsWithinItsBoundAndRepeatsItsBits) {
  auto made = CudnnBackend();
  ASSERT_TRUE(made.ok()) << made.status() << " (the GPU suite runs where cuDNN 9 loads)";
  Backend& b = **made;
  ASSERT_TRUE(b.Supports(Capability::kFusedAttention)) << "its state is the log-sum-exp";
  for (Precision p : k16) {
    const double u = p == Precision::kBf16 ? 0x1p-8 : 0x1p-11;
    // head sizes 8, 8, 32, 64 (GPT-2's), 128 and 256 (cuDNN's largest); lengths from the shortest
    // it takes (2) to ones that fill no tile
    for (auto [B, T, C, NH] : {std::tuple{1, 2, 8, 1}, std::tuple{2, 7, 16, 2}, std::tuple{1, 65, 64, 2},
                               std::tuple{2, 130, 128, 2}, std::tuple{1, 70, 256, 2}, std::tuple{1, 33, 256, 1}}) {
      SCOPED_TRACE(::testing::Message() << PrecisionName(p) << " " << B << "x" << T << "x" << C << " NH " << NH);
      const size_t n_qkv = static_cast<size_t>(B) * T * 3 * C, n_out = static_cast<size_t>(B) * T * C,
                   n_att = static_cast<size_t>(B) * NH * T * T, n_lse = static_cast<size_t>(B) * NH * T;
      const auto qkv = Random16(n_qkv, 11, p), dout = Random16(n_out, 12, p);
      const auto qkvf = Widen(qkv, p), doutf = Widen(dout, p);
      std::vector<uint16_t> out(n_out), dqkv(n_qkv);
      std::vector<float> att(n_att), scratch(n_att), out32(n_out), att32(n_att), dqkv32(n_qkv), lse(n_lse);
      cpu().AttentionForward(Ptr(out.data(), p), att.data(), CPtr(qkv.data(), p), B, T, C, NH, p);
      cpu().AttentionBackward(Ptr(dqkv.data(), p), scratch.data(), CPtr(dout.data(), p), CPtr(qkv.data(), p),
                              CPtr(out.data(), p), att.data(), B, T, C, NH);
      cpu().AttentionForward(out32.data(), att32.data(), qkvf.data(), B, T, C, NH, p);
      cpu().AttentionBackward(dqkv32.data(), scratch.data(), doutf.data(), qkvf.data(), out32.data(), att32.data(), B,
                              T, C, NH);
      attention_lse(lse.data(), qkvf.data(), B, T, C, NH);
      const AttentionRuns runs = RunTwice(b, p, qkv, dout, n_lse, [&](Ptr o, float* l, Ptr dq, CPtr x, CPtr d) {
        b.AttentionForward(o, l, x, B, T, C, NH, p);
        b.AttentionBackward(dq, nullptr, d, x, o, l, B, T, C, NH, p);
      });
      ASSERT_TRUE(runs.ok);
      const double d_out = kTol * MaxAbs(out32), d_dqkv = kTol * MaxAbs(dqkv32);
      const FusedExtra extra =
          FusedAttentionExtra(qkvf, doutf, Widen(runs.out[0], p), out32, att, B, T, C, NH, p, /*ds_rel=*/u);
      EXPECT_TRUE(Within16(runs.out[0], out, p, [&](size_t i) { return d_out + extra.out[i]; }));
      EXPECT_TRUE(Within16(runs.dqkv[0], dqkv, p, [&](size_t i) { return d_dqkv + extra.dqkv[i]; }));
      EXPECT_TRUE(Within(runs.lse[0], lse, [&](size_t i) { return kTol * (1 + std::fabs(lse[i])); }));
    }
  }
}

// cuDNN's stats output is the log-sum-exp the ring merges by: on the cuDNN path (the stand-in
// here, cuDNN itself in the GPU suite) a 16-bit causal self-attention's statistics are the
// natural-log LSE of the scaled scores, per row and head, fp32, which is what
// AttentionBlockForward writes for the same rows as one diagonal block (causal, first) of the
// widened values, grouped heads included. (RingBlocksOnCudnnMatchTheFp32BlocksEmulated runs
// the ring's blocks through cuDNN.)
TEST_F(BackendOpsTest, CudnnStatsAreTheRingBlocksLogSumExpEmulated) {
  auto made = CudnnBackend();
  ASSERT_TRUE(made.ok()) << made.status() << " (the GPU suite runs where cuDNN 9 loads)";
  Backend& b = **made;
  const Precision p = Precision::kBf16;
  for (auto [B, T, NH, NKV, hd] : {std::tuple{2, 7, 2, 2, 8}, std::tuple{1, 65, 4, 2, 32}, std::tuple{1, 33, 3, 1, 64}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B << " T " << T << " NH " << NH << " NKV " << NKV << " hd " << hd);
    const int W = (NH + 2 * NKV) * hd, C = NH * hd;
    const size_t n_lse = static_cast<size_t>(B) * NH * T;
    const auto qkv = Random16(static_cast<size_t>(B) * T * W, 51, p);
    Dev<uint16_t> eQkv(b, qkv), eOut(b, std::vector<uint16_t>(static_cast<size_t>(B) * T * C, kPoison16));
    Dev<float> eStats(b, n_lse);
    b.GroupedAttentionForward(Ptr(eOut.get(), p), eStats.get(), CPtr(eQkv.get(), p), B, T, NH, NKV, hd, p);
    ASSERT_TRUE(b.Synchronize().ok());
    const auto wide = Widen(qkv, p);
    std::vector<float> out(static_cast<size_t>(B) * T * C), lse(n_lse);
    const HeadRows<const float> q{wide.data(), static_cast<int64_t>(T) * W, W};
    cpu().AttentionBlockForward({out.data(), static_cast<int64_t>(T) * C, C}, {lse.data(), T}, q,
                                {wide.data() + C, q.seq, W}, {wide.data() + C + NKV * hd, q.seq, W},
                                {B, NH, NKV, hd, T, T, true, 0.f, /*first=*/true});
    EXPECT_TRUE(Within(eStats.Host(), lse, [&](size_t i) { return kTol * (1 + std::fabs(lse[i])); }));
  }
}

// Context parallelism's 16-bit blocks on cuDNN (AttentionBlock::values): a diagonal block
// (causal, first) and one below it (unmasked) merged, then both blocks' backward from the
// merged output (rounded to the type, as the model keeps it) and log-sum-exps, added into
// gradients that hold values; against the cpu backend's fp32 block ops on the same 16-bit
// values. Bound, relative to a tensor's largest value: each block's output and gradients are
// rounded to p once before the fp32 merge or sum (u_p of a partial; the merge's weights sum to
// 1, and an element of dq has two partials), cuDNN's tensor cores multiply 16-bit softmax
// weights (and, backward, 16-bit P and dS) by 16-bit operands (u_p of the terms' magnitudes),
// and the merged output, rounded to p on both sides, may land an ulp (2·u_p) apart where the
// two fp32 values straddle a rounding point: 4·u_p (measured up to 1.8·u_p here). The
// statistics in fp32 (1e-5). Every block on cuDNN: the backend's strict path (AttentionPath
// kCudnn) takes them or fails the op, so that a refusal would be this test's error.
TEST_F(BackendOpsTest, RingBlocksOnCudnnMatchTheFp32BlocksEmulated) {
  auto made = CudnnBackend();
  ASSERT_TRUE(made.ok()) << made.status() << " (the GPU suite runs where cuDNN 9 loads)";
  Backend& b = **made;
  for (Precision p : k16) {
    const double u = p == Precision::kBf16 ? 0x1p-8 : 0x1p-11;
    for (auto [B, NH, NKV, hd, L] : {std::tuple{2, 4, 2, 8, 4}, std::tuple{1, 6, 3, 64, 33}, std::tuple{2, 2, 1, 128, 9},
                                      std::tuple{1, 4, 4, 32, 16}}) {
      SCOPED_TRACE(::testing::Message() << PrecisionName(p) << " B " << B << " NH " << NH << " NKV " << NKV << " hd "
                                        << hd << " L " << L);
      const int W = (NH + 2 * NKV) * hd, C = NH * hd, KV = 2 * NKV * hd;
      const size_t nq = static_cast<size_t>(B) * L * W, no = static_cast<size_t>(B) * L * C,
                   ns = static_cast<size_t>(B) * NH * L, nkv = static_cast<size_t>(B) * L * KV;
      const auto qkv = Widen(Random16(nq, 61, p), p), kvb = Widen(Random16(nkv, 62, p), p),
                 dout = Widen(Random16(no, 63, p), p);
      const auto dq0 = Random(nq, 64), dkv0 = Random(nkv, 65);
      // The forward (16-bit on the cuDNN backend: the blocks' values p), then the backward from
      // the merged output rounded to p and the forward's statistics.
      auto run = [&](Backend& be, bool sixteen, float* out, float* lse, const float* q, const float* kv, float* D,
                     float* dq, float* dkv, const float* g) {
        const Precision values = sixteen ? p : Precision::kFp32;
        AttentionBlock diag{B, NH, NKV, hd, L, L, true, 0.f, /*first=*/true}, below{B, NH, NKV, hd, L, L, false, 0.f};
        diag.values = below.values = values;
        const HeadRows<const float> qr{q, static_cast<int64_t>(L) * W, W};
        const HeadRows<const float> kd{q + C, qr.seq, W}, vd{q + C + NKV * hd, qr.seq, W};
        const HeadRows<const float> kb{kv, static_cast<int64_t>(L) * KV, KV}, vb{kv + NKV * hd, kb.seq, KV};
        const HeadRows<float> o{out, static_cast<int64_t>(L) * C, C};
        be.AttentionBlockForward(o, {lse, L}, qr, kd, vd, diag);
        be.AttentionBlockForward(o, {lse, L}, qr, kb, vb, below);
        be.RoundTo(out, out, static_cast<int64_t>(no), p);  // the model keeps its output in p
        const HeadRows<const float> oc{out, o.seq, C}, gr{g, o.seq, C};
        be.AttentionBlockDelta({D, L}, gr, oc, B, NH, hd, L);
        const HeadRows<float> dqh{dq, qr.seq, W}, dkd{dq + C, qr.seq, W}, dvd{dq + C + NKV * hd, qr.seq, W};
        const HeadRows<float> dkb{dkv, kb.seq, KV}, dvb{dkv + NKV * hd, kb.seq, KV};
        AttentionBlock diag_b{B, NH, NKV, hd, L, L, true, 0.f};
        diag_b.values = values;
        be.AttentionBlockBackward(dqh, dkd, dvd, qr, kd, vd, gr, oc, {lse, L}, {D, L}, diag_b);
        be.AttentionBlockBackward(dqh, dkb, dvb, qr, kb, vb, gr, oc, {lse, L}, {D, L}, below);
      };
      std::vector<float> out(no), lse(ns), D(ns), dq = dq0, dkv = dkv0;
      run(cpu(), false, out.data(), lse.data(), qkv.data(), kvb.data(), D.data(), dq.data(), dkv.data(), dout.data());
      Dev<float> eQ(b, qkv), eKv(b, kvb), eG(b, dout), eOut(b, no), eLse(b, ns), eD(b, ns), eDq(b, dq0), eDkv(b, dkv0);
      run(b, true, eOut.get(), eLse.get(), eQ.get(), eKv.get(), eD.get(), eDq.get(), eDkv.get(), eG.get());
      const absl::Status ran = b.Synchronize();  // a block the strict path refused: its error
      ASSERT_TRUE(ran.ok()) << ran;
      // Gradients against what the blocks added (the held values taken off: their magnitude is
      // not the blocks').
      auto added = [](std::vector<float> x, const std::vector<float>& held) {
        for (size_t i = 0; i < x.size(); ++i) x[i] -= held[i];
        return x;
      };
      const double e_out = RelErr(eOut.Host(), out), e_dq = RelErr(added(eDq.Host(), dq0), added(dq, dq0)),
                   e_dkv = RelErr(added(eDkv.Host(), dkv0), added(dkv, dkv0));
      EXPECT_LE(e_out, 4 * u) << "out";
      EXPECT_LE(RelErr(eLse.Host(), lse), kTol) << "lse";
      EXPECT_LE(e_dq, 4 * u) << "dq (and the diagonal's dk, dv)";
      EXPECT_LE(e_dkv, 4 * u) << "the K/V block's dk, dv";
      std::printf("%s B %d NH %d NKV %d hd %d L %d: out %.2g, dq %.2g, dkv %.2g of u_p's %.2g\n", PrecisionName(p), B,
                  NH, NKV, hd, L, e_out, e_dq, e_dkv, u);
    }
  }
}

// Grouped-query attention straight through cuDNN (Backend::GroupedAttentionForward/Backward:
// SDPA with K and V of NKV heads, dK and dV summed over each group by cuDNN) against the cpu
// backend's grouped call, which is the model's sequence there: GqaExpand, the 16-bit attention
// ops, GqaReduce (checked here bit for bit). NKV from 1 (multi-query) to NH. The bound of
// CudnnAttentionIsWithinItsBoundAndRepeatsItsBits on the repeated problem (3·NH heads: out, the
// query heads' gradient and each repeated key/value head's d_dqkv + extra), and for a key/value
// head's gradient its group's sum of those: the cpu rounds each query head's share to 16 bits
// before it sums them (half an ulp of the share's fp32 value, beside its bound), cuDNN sums
// them unrounded; both round the sum once (Within16's ulp). The statistics and run-to-run
// bits as there.
TEST_F(BackendOpsTest, CudnnGroupedAttentionIsWithinItsBoundAndRepeatsItsBits) {
  auto made = CudnnBackend();
  ASSERT_TRUE(made.ok()) << made.status() << " (the GPU suite runs where cuDNN 9 loads)";
  Backend& b = **made;
  for (Precision p : k16) {
    const double u = p == Precision::kBf16 ? 0x1p-8 : 0x1p-11;
    // (B, T, NH, NKV, hd): multi-query (NKV 1), groups of 2 and 3, NKV = NH, the Llama's 12 over 4
    // heads of 64; head sizes 8 to 128.
    for (auto [B, T, NH, NKV, hd] :
         {std::tuple{1, 2, 1, 1, 8}, std::tuple{2, 7, 4, 1, 8}, std::tuple{1, 33, 6, 2, 16},
          std::tuple{2, 17, 3, 3, 32}, std::tuple{1, 40, 12, 4, 64}, std::tuple{1, 19, 2, 1, 128}}) {
      SCOPED_TRACE(::testing::Message() << PrecisionName(p) << " " << B << "x" << T << " NH " << NH << " NKV " << NKV
                                        << " hd " << hd);
      ASSERT_TRUE(b.Supports(Capability::kGroupedAttention, {B, T, NH, NKV, hd, p}));
      const int C = NH * hd, W = (NH + 2 * NKV) * hd, group = NH / NKV;
      const size_t BT = static_cast<size_t>(B) * T, n_qkv = BT * W, n_qkv3 = BT * 3 * C, n_out = BT * C,
                   n_att = static_cast<size_t>(B) * NH * T * T, n_lse = static_cast<size_t>(B) * NH * T;
      const auto qkv = Random16(n_qkv, 21, p), dout = Random16(n_out, 22, p);
      const auto doutf = Widen(dout, p);
      // The cpu's grouped call, and the model's three ops it stands for.
      std::vector<uint16_t> out(n_out), dqkv(n_qkv), qkv3(n_qkv3), out3(n_out), dqkv3(n_qkv3), dqkv_reduced(n_qkv);
      std::vector<float> att(n_att), att3(n_att), scratch(n_att), out32(n_out), att32(n_att), dqkv32(n_qkv3),
          lse(n_lse);
      cpu().GroupedAttentionForward(Ptr(out.data(), p), att.data(), CPtr(qkv.data(), p), B, T, NH, NKV, hd, p);
      cpu().GroupedAttentionBackward(Ptr(dqkv.data(), p), scratch.data(), CPtr(dout.data(), p), CPtr(qkv.data(), p),
                                     CPtr(out.data(), p), att.data(), B, T, NH, NKV, hd, p);
      cpu().GqaExpand(Ptr(qkv3.data(), p), CPtr(qkv.data(), p), static_cast<int64_t>(BT), NH, NKV, hd);
      cpu().AttentionForward(Ptr(out3.data(), p), att3.data(), CPtr(qkv3.data(), p), B, T, C, NH, p);
      cpu().AttentionBackward(Ptr(dqkv3.data(), p), scratch.data(), CPtr(dout.data(), p), CPtr(qkv3.data(), p),
                              CPtr(out3.data(), p), att3.data(), B, T, C, NH);
      cpu().GqaReduce(Ptr(dqkv_reduced.data(), p), CPtr(dqkv3.data(), p), static_cast<int64_t>(BT), NH, NKV, hd);
      ASSERT_TRUE(cpu().Synchronize().ok());
      EXPECT_TRUE(SameBits(out, out3)) << "the cpu's grouped forward is expand, attention";
      EXPECT_TRUE(SameBits(dqkv, dqkv_reduced)) << "the cpu's grouped backward is attention backward, reduce";
      // The repeated problem in fp32 on the widened values: the bounds' scale and extra terms.
      const auto qkv3f = Widen(qkv3, p);
      cpu().AttentionForward(out32.data(), att32.data(), qkv3f.data(), B, T, C, NH, p);
      cpu().AttentionBackward(dqkv32.data(), scratch.data(), doutf.data(), qkv3f.data(), out32.data(), att32.data(), B,
                              T, C, NH);
      attention_lse(lse.data(), qkv3f.data(), B, T, C, NH);
      const AttentionRuns runs = RunTwice(b, p, qkv, dout, n_lse, [&](Ptr o, float* l, Ptr dq, CPtr x, CPtr d) {
        b.GroupedAttentionForward(o, l, x, B, T, NH, NKV, hd, p);
        b.GroupedAttentionBackward(dq, nullptr, d, x, o, l, B, T, NH, NKV, hd, p);
      });
      ASSERT_TRUE(runs.ok);
      const double d_out = kTol * MaxAbs(out32), d_dqkv = kTol * MaxAbs(dqkv32);
      const FusedExtra extra =
          FusedAttentionExtra(qkv3f, doutf, Widen(runs.out[0], p), out32, att, B, T, C, NH, p, /*ds_rel=*/u);
      EXPECT_TRUE(Within16(runs.out[0], out, p, [&](size_t i) { return d_out + extra.out[i]; }));
      // Element i of the grouped rows (row r, channel c): a query channel's bound is its own; a
      // key/value channel's the sum over the query heads of its group.
      auto grouped_bound = [&](size_t i) {
        const size_t r = i / W;
        const int c = static_cast<int>(i % W);
        auto at3 = [&](int part, int h, int d) { return r * 3 * C + static_cast<size_t>(part) * C + h * hd + d; };
        if (c < C) return d_dqkv + extra.dqkv[at3(0, c / hd, c % hd)];
        const int part = c < C + NKV * hd ? 1 : 2, kv = (c - C - (part - 1) * NKV * hd) / hd, d = c % hd;
        double bound = 0;
        for (int h = kv * group; h < (kv + 1) * group; ++h) {
          const size_t j = at3(part, h, d);
          bound += d_dqkv + extra.dqkv[j] + Ulp(std::fabs(static_cast<double>(dqkv32[j])), p) / 2;
        }
        return bound;
      };
      EXPECT_TRUE(Within16(runs.dqkv[0], dqkv, p, grouped_bound));
      EXPECT_TRUE(Within(runs.lse[0], lse, [&](size_t i) { return kTol * (1 + std::fabs(lse[i])); }));
    }
  }
}

// Grouped calls that no path here takes: a grouping whose query heads are not a multiple of the
// key/value heads (every backend, naming both); NKV < NH where cuDNN does not run it (the fused
// path; a head size cuDNN refuses), naming why. NKV = NH on the fused path is the attention op.
TEST_F(BackendOpsTest, GroupedAttentionRefusesABadGroupingAndRunsOffCudnnOnlyUngrouped) {
  const BackendKind kind = *ParseBackendKind(GANTRY_TEST_BACKEND);
  BackendOptions strict, fused;
  strict.attention = AttentionPath::kCudnn;
  fused.attention = AttentionPath::kFused;
  auto s = CreateBackend(kind, 0, strict), f = CreateBackend(kind, 0, fused);
  ASSERT_TRUE(s.ok() && f.ok()) << s.status() << f.status();
  const Precision p = Precision::kBf16;
  auto run = [&](Backend& be, int NH, int NKV, int hd, std::vector<uint16_t>* out16) {
    const int B = 2, T = 9, W = (NH + 2 * NKV) * hd;
    const size_t n_out = static_cast<size_t>(B) * T * NH * hd;
    Dev<uint16_t> eQkv(be, Random16(static_cast<size_t>(B) * T * W, 7, p)),
        eOut(be, std::vector<uint16_t>(n_out, kPoison16));
    Dev<float> eLse(be, static_cast<size_t>(B) * NH * T);
    be.GroupedAttentionForward(Ptr(eOut.get(), p), eLse.get(), CPtr(eQkv.get(), p), B, T, NH, NKV, hd, p);
    absl::Status st = be.Synchronize();
    if (st.ok() && out16 != nullptr) *out16 = eOut.Host();
    return st;
  };
  for (Backend* be : {s->get(), f->get(), &cpu()}) {
    const absl::Status st = run(*be, 6, 4, 16, nullptr);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("6 query heads over 4 key/value heads"), std::string::npos) << st;
  }
  EXPECT_FALSE(f->get()->Supports(Capability::kGroupedAttention, {2, 9, 4, 2, 16, p}));
  absl::Status st = run(**f, 4, 2, 16, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("cuDNN's attention only, and the attention path is fused"), std::string::npos) << st;
  EXPECT_FALSE(s->get()->Supports(Capability::kGroupedAttention, {2, 9, 4, 2, 12, p}));
  st = run(**s, 4, 2, 12, nullptr);
  EXPECT_NE(st.message().find("head sizes that are multiples of 8"), std::string::npos) << st;
  EXPECT_FALSE(s->get()->Supports(Capability::kGroupedAttention, {2, 9, 4, 2, 16, Precision::kFp32})) << "fp32 weights";
  // NKV = NH off cuDNN: the fused kernels' attention op on the same rows.
  std::vector<uint16_t> grouped, plain(static_cast<size_t>(2) * 9 * 32, kPoison16);
  ASSERT_TRUE(run(**f, 2, 2, 16, &grouped).ok());
  {
    Dev<uint16_t> eQkv(**f, Random16(static_cast<size_t>(2) * 9 * 96, 7, p)), eOut(**f, plain);
    Dev<float> eLse(**f, static_cast<size_t>(2) * 2 * 9);
    f->get()->AttentionForward(Ptr(eOut.get(), p), eLse.get(), CPtr(eQkv.get(), p), 2, 9, 32, 2, p);
    ASSERT_TRUE(f->get()->Synchronize().ok());
    plain = eOut.Host();
  }
  EXPECT_TRUE(SameBits(grouped, plain));
}

// Backends of the tested kind on the attention paths cudnn (s), auto (a) and fused (f).
struct AttentionPaths {
  absl::StatusOr<std::unique_ptr<Backend>> s, a, f;
};
AttentionPaths MakeAttentionPaths() {
  const BackendKind kind = *ParseBackendKind(GANTRY_TEST_BACKEND);
  BackendOptions strict, automatic, fused;
  strict.attention = AttentionPath::kCudnn;
  fused.attention = AttentionPath::kFused;
  return {CreateBackend(kind, 0, strict), CreateBackend(kind, 0, automatic), CreateBackend(kind, 0, fused)};
}

// What cuDNN cannot take: with the cudnn path a clear error naming why; with auto the fused
// kernels, which give the fused path's bits. fp32 calls take the fused kernels on both.
TEST_F(BackendOpsTest, CudnnAttentionRefusesWhatItCannotTakeAndAutoFallsBack) {
  auto [s, a, f] = MakeAttentionPaths();
  ASSERT_TRUE(s.ok() && a.ok() && f.ok()) << s.status() << a.status() << f.status();
  const Precision p = Precision::kBf16;
  auto run = [&](Backend& be, int B, int T, int C, int NH, Precision weights, bool sixteen, size_t misalign,
                 std::vector<uint16_t>* out16) {
    const size_t n_qkv = static_cast<size_t>(B) * T * 3 * C, n_out = static_cast<size_t>(B) * T * C;
    Dev<uint16_t> eQkv(be, Random16(n_qkv + 8, 5, p)), eOut(be, std::vector<uint16_t>(n_out + 8, kPoison16));
    Dev<float> eQkv32(be, Random(n_qkv, 5)), eOut32(be, n_out), eLse(be, static_cast<size_t>(B) * NH * T);
    if (sixteen) {
      be.AttentionForward(Ptr(eOut.get() + misalign, p), eLse.get(), CPtr(eQkv.get(), p), B, T, C, NH, weights);
    } else {
      be.AttentionForward(eOut32.get(), eLse.get(), eQkv32.get(), B, T, C, NH, weights);
    }
    absl::Status st = be.Synchronize();
    if (st.ok() && out16 != nullptr) *out16 = eOut.Host();
    return st;
  };
  // head size 11
  absl::Status st = run(**s, 1, 9, 33, 3, p, true, 0, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("head sizes that are multiples of 8"), std::string::npos) << st;
  // weights kept in fp32
  st = run(**s, 1, 9, 32, 2, Precision::kFp32, true, 0, nullptr);
  EXPECT_NE(st.message().find("rounds the softmax weights"), std::string::npos) << st;
  // out 2 bytes past an aligned address
  st = run(**s, 1, 9, 32, 2, p, true, 1, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("16-byte aligned"), std::string::npos) << st;
  // one token
  st = run(**s, 2, 1, 32, 2, p, true, 0, nullptr);
  EXPECT_NE(st.message().find("2 tokens or more"), std::string::npos) << st;
  EXPECT_TRUE(run(**s, 1, 9, 32, 2, Precision::kFp32, false, 0, nullptr).ok()) << "fp32 takes the fused kernels";
  // auto: the fused kernels' bits where cuDNN cannot take the call
  for (auto [T, C, NH, weights] : {std::tuple{9, 33, 3, p}, std::tuple{9, 32, 2, Precision::kFp32},
                                   std::tuple{1, 32, 2, p}}) {
    std::vector<uint16_t> by_auto, by_fused;
    ASSERT_TRUE(run(**a, 2, T, C, NH, weights, true, 0, &by_auto).ok());
    ASSERT_TRUE(run(**f, 2, T, C, NH, weights, true, 0, &by_fused).ok());
    EXPECT_TRUE(SameBits(by_auto, by_fused)) << "T " << T << " C " << C << " NH " << NH;
  }
}

// A test switch of the emulated libraries (kernels/emulated: cudnn_frontend.h's
// kNoPlanVariable, cuda_api.h's kNoAlgorithmVariable) set for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { EXPECT_EQ(setenv(name, value, 1), 0); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// The emulated libraries' "no plan" and "no algorithm" switches exist on cuda-emulated only; on a
// GPU these refusals come from the libraries themselves, when they come.
bool EmulatedLibraries() { return *ParseBackendKind(GANTRY_TEST_BACKEND) == BackendKind::kCudaEmulated; }

// The notices a backend holds that contain `part`.
int NoticesWith(const std::vector<std::string>& notices, const std::string& part) {
  return static_cast<int>(std::count_if(notices.begin(), notices.end(),
                                        [&](const std::string& n) { return n.find(part) != std::string::npos; }));
}

// Where cuDNN has no plan for an attention graph (the emulated cuDNN told to answer so), the auto
// path runs that call on the fused kernels, with their bits, forward and backward alike, and says
// so once (Backend::TakeNotices); the cudnn path fails, naming the refusal. Fails if the
// refusal became the step's error, or if the notice repeated at every call.
TEST_F(BackendOpsTest, CudnnWithoutAPlanFallsBackToTheFusedKernelsAndSaysSoOnce) {
  if (!EmulatedLibraries()) GTEST_SKIP() << "the no-plan switch is the emulated cuDNN's (cuda-emulated only)";
  const ScopedEnv no_plan(emucudnn::kNoPlanVariable, "all");
  auto [s, a, f] = MakeAttentionPaths();
  ASSERT_TRUE(s.ok() && a.ok() && f.ok()) << s.status() << a.status() << f.status();
  const Precision p = Precision::kBf16;
  const int B = 2, T = 9, C = 32, NH = 2;
  const size_t n_qkv = static_cast<size_t>(B) * T * 3 * C, n_out = static_cast<size_t>(B) * T * C;
  const auto qkv = Random16(n_qkv, 11, p), dout = Random16(n_out, 12, p);
  // out, lse and dqkv of a forward and a backward on be.
  auto run = [&](Backend& be, std::vector<uint16_t>* out, std::vector<float>* lse, std::vector<uint16_t>* dqkv) {
    Dev<uint16_t> eQkv(be, qkv), eDout(be, dout), eOut(be, std::vector<uint16_t>(n_out, kPoison16)),
        eDqkv(be, std::vector<uint16_t>(n_qkv, kPoison16));
    Dev<float> eLse(be, static_cast<size_t>(B) * NH * T);
    be.AttentionForward(Ptr(eOut.get(), p), eLse.get(), CPtr(eQkv.get(), p), B, T, C, NH, p);
    be.AttentionBackward(Ptr(eDqkv.get(), p), nullptr, CPtr(eDout.get(), p), CPtr(eQkv.get(), p),
                         CPtr(eOut.get(), p), eLse.get(), B, T, C, NH, p);
    const absl::Status st = be.Synchronize();
    if (st.ok()) *out = eOut.Host(), *lse = eLse.Host(), *dqkv = eDqkv.Host();
    return st;
  };
  std::vector<uint16_t> out_a, out_f, dqkv_a, dqkv_f;
  std::vector<float> lse_a, lse_f;
  ASSERT_TRUE(run(**a, &out_a, &lse_a, &dqkv_a).ok());
  ASSERT_TRUE(run(**f, &out_f, &lse_f, &dqkv_f).ok());
  EXPECT_TRUE(SameBits(out_a, out_f)) << "forward: the fused kernels' bits";
  EXPECT_TRUE(SameBits(lse_a, lse_f));
  EXPECT_TRUE(SameBits(dqkv_a, dqkv_f)) << "backward: the fused kernels' bits";
  const std::vector<std::string> said = (*a)->TakeNotices();
  EXPECT_EQ(NoticesWith(said, "cuDNN has no plan for the attention forward"), 1) << ::testing::PrintToString(said);
  EXPECT_EQ(NoticesWith(said, "cuDNN has no plan for the attention backward"), 1) << ::testing::PrintToString(said);
  EXPECT_EQ(NoticesWith(said, "fused kernels instead"), 2) << ::testing::PrintToString(said);
  ASSERT_TRUE(run(**a, &out_a, &lse_a, &dqkv_a).ok());
  EXPECT_TRUE((*a)->TakeNotices().empty()) << "said once, not at every call";
  EXPECT_TRUE((*f)->TakeNotices().empty()) << "the fused path asked cuDNN nothing";
  const absl::Status st = run(**s, &out_a, &lse_a, &dqkv_a);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_NE(st.message().find("cuDNN has no plan"), std::string::npos) << st;
}

// Where cuDNN plans the grouped-heads forward but not its backward (the first suspect on SM90:
// grouped heads with the deterministic backward), Supports(kGroupedAttention) says no, once said why,
// so that the model repeats the key/value heads (the first fallback); heads that are not grouped
// are still taken, and without the refusal grouped ones are.
TEST_F(BackendOpsTest, GroupedHeadsWithoutABackwardPlanAreRepeatedInstead) {
  if (!EmulatedLibraries()) GTEST_SKIP() << "the no-plan switch is the emulated cuDNN's (cuda-emulated only)";
  const BackendKind kind = *ParseBackendKind(GANTRY_TEST_BACKEND);
  const Precision p = Precision::kBf16;
  const int B = 2, T = 9, NH = 4, NKV = 2, hd = 16;
  {
    auto plain = CreateBackend(kind, 0);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_TRUE((*plain)->Supports(Capability::kGroupedAttention, {B, T, NH, NKV, hd, p})) << "planned: taken";
    EXPECT_TRUE((*plain)->TakeNotices().empty());
  }
  const ScopedEnv no_plan(emucudnn::kNoPlanVariable, "grouped-backward");
  auto be = CreateBackend(kind, 0);
  ASSERT_TRUE(be.ok()) << be.status();
  EXPECT_FALSE((*be)->Supports(Capability::kGroupedAttention, {B, T, NH, NKV, hd, p}));
  const std::vector<std::string> said = (*be)->TakeNotices();
  ASSERT_EQ(said.size(), 1u) << ::testing::PrintToString(said);
  EXPECT_NE(said[0].find("cuDNN has no plan for the attention backward"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("key/value heads are repeated"), std::string::npos) << said[0];
  EXPECT_FALSE((*be)->Supports(Capability::kGroupedAttention, {B, T, NH, NKV, hd, p}));
  EXPECT_TRUE((*be)->TakeNotices().empty()) << "the refusal is remembered per shape, and said once";
  EXPECT_TRUE((*be)->Supports(Capability::kGroupedAttention, {B, T, NH, NH, hd, p}))
      << "one key/value head a query head";
}

// Where cuBLASLt has no algorithm for its bias epilogue, a biased GEMM runs without it and a
// kernel adds the bias to the stored product: the epilogue's own bits (a 16-bit output rounded
// twice, as on a GPU; fp32 once), said once.
TEST_F(BackendOpsTest, CublasLtWithoutTheBiasEpilogueGivesTheEpiloguesBits) {
  if (!EmulatedLibraries()) GTEST_SKIP() << "the no-algorithm switch is the emulated cuBLASLt's (cuda-emulated only)";
  const BackendKind kind = *ParseBackendKind(GANTRY_TEST_BACKEND);
  const int N = 37, C = 48, OC = 40;
  for (Precision p : {Precision::kBf16, Precision::kFp32}) {
    SCOPED_TRACE(PrecisionName(p));
    auto run = [&](Backend& be) {
      const bool half = p != Precision::kFp32;
      auto values = [&](size_t n, uint64_t seed) {
        return half ? Random16(n, seed, p) : std::vector<uint16_t>();
      };
      Dev<uint16_t> hI(be, values(size_t{N} * C, 1)), hW(be, values(size_t{C} * OC, 2)), hB(be, values(OC, 3)),
          hO(be, std::vector<uint16_t>(half ? size_t{N} * OC : 0, kPoison16));
      Dev<float> fI(be, Random(size_t{N} * C, 1)), fW(be, Random(size_t{C} * OC, 2)), fB(be, Random(OC, 3)),
          fO(be, size_t{N} * OC);
      if (half) {
        be.MatmulForward(Ptr(hO.get(), p), CPtr(hI.get(), p), CPtr(hW.get(), p), CPtr(hB.get(), p), N, C, OC);
      } else {
        be.MatmulForward(fO.get(), fI.get(), fW.get(), fB.get(), N, C, OC);
      }
      EXPECT_TRUE(be.Synchronize().ok());
      return half ? Widen(hO.Host(), p) : fO.Host();
    };
    auto with = CreateBackend(kind, 0);
    ASSERT_TRUE(with.ok()) << with.status();
    const uint64_t before = EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_BIAS);
    const std::vector<float> want = run(**with);
    ASSERT_GT(EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_BIAS), before) << "the default takes the bias epilogue";
    const ScopedEnv no_algo(emucuda::kNoAlgorithmVariable, "bias");
    auto without = CreateBackend(kind, 0);
    ASSERT_TRUE(without.ok()) << without.status();
    const uint64_t runs = EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_BIAS);
    EXPECT_TRUE(SameBits(run(**without), want));
    EXPECT_EQ(EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_BIAS), runs) << "no algorithm: the epilogue did not run";
    const std::vector<std::string> said = (*without)->TakeNotices();
    EXPECT_EQ(NoticesWith(said, "cuBLASLt has no algorithm for its BIAS epilogue"), 1) << ::testing::PrintToString(said);
    (void)run(**without);
    EXPECT_TRUE((*without)->TakeNotices().empty()) << "said once";
  }
}

// Where cuBLASLt has no algorithm for the GELU and bias-gradient epilogues, the ops with them on
// (BackendOptions::gelu_epilogue) take their unfused paths: the bits of the epilogues off, said
// once per epilogue.
TEST_F(BackendOpsTest, WithoutTheGeluEpiloguesTheOpsGiveTheBitsOfTheEpiloguesOff) {
  if (!EmulatedLibraries()) GTEST_SKIP() << "the no-algorithm switch is the emulated cuBLASLt's (cuda-emulated only)";
  const Precision p = Precision::kBf16;
  const int N = 33, C = 64, OC = 48;
  // pre, out (the fused forward); dinp, dweight, dbias, gelu_dbias (the backward through it).
  auto run = [&](Backend& be) {
    Dev<uint16_t> eI(be, Random16(size_t{N} * C, 1, p)), eW(be, Random16(size_t{C} * OC, 2, p)),
        eB(be, Random16(OC, 3, p)), ePre(be, std::vector<uint16_t>(size_t{N} * OC, kPoison16)),
        eOut(be, std::vector<uint16_t>(size_t{N} * OC, kPoison16)), eDout(be, Random16(size_t{N} * C, 4, p)),
        eW2(be, Random16(size_t{OC} * C, 5, p)), eDinp(be, std::vector<uint16_t>(size_t{N} * OC, kPoison16));
    Dev<float> eDw(be, Random(size_t{OC} * C, 6)), eDb(be, Random(C, 7)), eGdb(be, Random(OC, 8));
    be.MatmulBiasGeluForward(Ptr(ePre.get(), p), Ptr(eOut.get(), p), CPtr(eI.get(), p), CPtr(eW.get(), p),
                             CPtr(eB.get(), p), N, C, OC);
    // the next layer's backward: dout (N, C) through W2 (OC, C) to dinp (N, OC), through the GELU of pre
    be.MatmulBackward(Ptr(eDinp.get(), p), eDw.get(), eDb.get(), CPtr(eDout.get(), p), CPtr(eOut.get(), p),
                      CPtr(eW2.get(), p), N, OC, C, WeightLayout::kInOut, CPtr(ePre.get(), p), eGdb.get());
    EXPECT_TRUE(be.Synchronize().ok());
    std::vector<std::vector<float>> got = {Widen(ePre.Host(), p), Widen(eOut.Host(), p), Widen(eDinp.Host(), p),
                                           eDw.Host(), eDb.Host(), eGdb.Host()};
    return got;
  };
  auto off = WithGeluEpilogue(false);
  ASSERT_TRUE(off.ok()) << off.status();
  const auto want = run(**off);
  const ScopedEnv no_algo(emucuda::kNoAlgorithmVariable, "fused");
  auto on = WithGeluEpilogue(true);
  ASSERT_TRUE(on.ok()) << on.status();
  const uint64_t gelu = EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_GELU_AUX_BIAS),
                 dgelu = EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_DGELU_BGRAD),
                 bgrad = EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_BGRADA);
  const auto got = run(**on);
  const char* names[] = {"pre", "out", "dinp", "dweight", "dbias", "gelu_dbias"};
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(SameBits(got[i], want[i])) << names[i];
  EXPECT_EQ(EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_GELU_AUX_BIAS), gelu);
  EXPECT_EQ(EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_DGELU_BGRAD), dgelu);
  EXPECT_EQ(EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_BGRADA), bgrad);
  const std::vector<std::string> said = (*on)->TakeNotices();
  for (const char* e : {"GELU_AUX_BIAS", "DGELU_BGRAD", "BGRADA"}) {
    EXPECT_EQ(NoticesWith(said, std::string("its ") + e + " epilogue"), 1) << e << ": " << ::testing::PrintToString(said);
  }
  (void)run(**on);
  EXPECT_TRUE((*on)->TakeNotices().empty()) << "said once";
}

// BackendOptions::gemm_autotune: each GEMM shape's algorithm chosen by timing the heuristic's
// offers at its first call. Whichever is chosen, the output is a GEMM's: here (the emulated
// cuBLASLt's offers compute alike) the bits of the untuned backend, and on cuda-emulated the
// counts show the offers timed at the first call of a shape and not again.
TEST_F(BackendOpsTest, AutotunedGemmsAreTimedOncePerShape) {
  const BackendKind kind = *ParseBackendKind(GANTRY_TEST_BACKEND);
  BackendOptions tuned;
  tuned.gemm_autotune = true;
  auto t = CreateBackend(kind, 0, tuned), plain = CreateBackend(kind, 0);
  ASSERT_TRUE(t.ok() && plain.ok()) << t.status() << plain.status();
  const Precision p = Precision::kBf16;
  const int N = 40, C = 64, OC = 72;
  auto run = [&](Backend& be, uint64_t* gemms) {
    Dev<uint16_t> eI(be, Random16(size_t{N} * C, 1, p)), eW(be, Random16(size_t{C} * OC, 2, p)),
        eB(be, Random16(OC, 3, p)), eO(be, std::vector<uint16_t>(size_t{N} * OC, kPoison16));
    const uint64_t before = EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_BIAS);
    be.MatmulForward(Ptr(eO.get(), p), CPtr(eI.get(), p), CPtr(eW.get(), p), CPtr(eB.get(), p), N, C, OC);
    EXPECT_TRUE(be.Synchronize().ok());
    *gemms = EpilogueRuns(emucuda::CUBLASLT_EPILOGUE_BIAS) - before;
    return eO.Host();
  };
  uint64_t first = 0, second = 0, untuned = 0;
  const auto want = run(**plain, &untuned);
  EXPECT_TRUE(SameBits(run(**t, &first), want));
  EXPECT_TRUE(SameBits(run(**t, &second), want));
  if (!CountsEpilogues()) GTEST_SKIP() << "the GEMM counts are the emulated cuBLASLt's; the bits were checked";
  EXPECT_EQ(untuned, 1u);
  EXPECT_GT(first, 1u) << "the offers timed at the shape's first call";
  EXPECT_EQ(second, 1u) << "and not again";
}

// Where cuDNN cannot be loaded (GANTRY_CUDNN_LIBRARY names a file that is not there): the
// cudnn path is refused, naming the library; auto runs 16-bit attention on the fused kernels.
TEST_F(BackendOpsTest, WithoutTheCudnnLibraryTheCudnnPathIsRefusedAndAutoRunsTheFusedKernels) {
  const BackendKind kind = *ParseBackendKind(GANTRY_TEST_BACKEND);
  ASSERT_EQ(setenv("GANTRY_CUDNN_LIBRARY", "libcudnn-gantry-test-absent.so.9", 1), 0);
  BackendOptions strict, automatic;
  strict.attention = AttentionPath::kCudnn;
  auto s = CreateBackend(kind, 0, strict);
  auto a = CreateBackend(kind, 0, automatic);
  unsetenv("GANTRY_CUDNN_LIBRARY");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
  EXPECT_NE(s.status().message().find("libcudnn-gantry-test-absent.so.9"), std::string::npos) << s.status();
  ASSERT_TRUE(a.ok()) << a.status();
  BackendOptions fused;
  fused.attention = AttentionPath::kFused;
  auto f = CreateBackend(kind, 0, fused);
  ASSERT_TRUE(f.ok()) << f.status();
  const Precision p = Precision::kBf16;
  const int B = 1, T = 5, C = 16, NH = 2;
  const size_t n_qkv = static_cast<size_t>(B) * T * 3 * C, n_out = static_cast<size_t>(B) * T * C;
  const auto qkv = Random16(n_qkv, 3, p);
  std::vector<uint16_t> got[2];
  Backend* backends[2] = {a->get(), f->get()};
  for (int i = 0; i < 2; ++i) {
    Dev<uint16_t> eQkv(*backends[i], qkv), eOut(*backends[i], std::vector<uint16_t>(n_out, kPoison16));
    Dev<float> eLse(*backends[i], static_cast<size_t>(B) * NH * T);
    backends[i]->AttentionForward(Ptr(eOut.get(), p), eLse.get(), CPtr(eQkv.get(), p), B, T, C, NH, p);
    ASSERT_TRUE(backends[i]->Synchronize().ok());
    got[i] = eOut.Host();
  }
  EXPECT_TRUE(SameBits(got[0], got[1])) << "auto without cuDNN: the fused kernels' bits";
}

// The classifier with 16-bit logits, whole and vocabulary-parallel over 2 and 3 ranks: losses
// and stats fp32, the gradient written in place rounded.
TEST_F(BackendOpsTest, TheClassifierOf16BitLogitsMatchesTheCpuBackend) {
  for (Precision p : k16) {
    for (auto [N, V] : {std::tuple{1, 1}, std::tuple{7, 33}, std::tuple{16, 257}, std::tuple{3, 1000},
                        std::tuple{33, 1256}}) {
      SCOPED_TRACE(::testing::Message() << PrecisionName(p) << " " << N << " rows, V " << V);
      const size_t n = static_cast<size_t>(N) * V;
      const auto logits = Random16(n, 1, p, 3.f);
      const auto lw = Widen(logits, p);
      const auto tgt = Tokens(N, V, 2);
      const float dloss = 0.5f / N;
      std::vector<float> losses(N), fused_losses(N), grad32 = lw, fused32(N);
      std::vector<uint16_t> grad = logits;
      cpu().CrossEntropyForward(losses.data(), CPtr(logits.data(), p), tgt.data(), N, V);
      cpu().CrossEntropyFusedForwardBackward(fused_losses.data(), Ptr(grad.data(), p), tgt.data(), dloss, N, V);
      cpu().CrossEntropyFusedForwardBackward(fused32.data(), grad32.data(), tgt.data(), dloss, N, V);
      Dev<int32_t> eT(be(), tgt);
      Dev<uint16_t> eL(be(), logits), eGrad(be(), logits);
      Dev<float> eLoss(be(), N), eFused(be(), N), eLw(be(), lw), eLoss32(be(), N), eGrad32(be(), lw), eFused32(be(), N);
      be().CrossEntropyForward(eLoss.get(), CPtr(eL.get(), p), eT.get(), N, V);
      be().CrossEntropyFusedForwardBackward(eFused.get(), Ptr(eGrad.get(), p), eT.get(), dloss, N, V);
      be().CrossEntropyForward(eLoss32.get(), eLw.get(), eT.get(), N, V);
      be().CrossEntropyFusedForwardBackward(eFused32.get(), eGrad32.get(), eT.get(), dloss, N, V);
      ASSERT_TRUE(Ok());
      const auto got_grad = eGrad.Host();
      // fp32 inside: the losses are the fp32 op's on the widened logits, the gradient its
      // values rounded once (the target's (p - 1) dloss computed in fp32 first).
      EXPECT_TRUE(SameBits(eLoss.Host(), eLoss32.Host()));
      EXPECT_TRUE(SameBits(eFused.Host(), eFused32.Host()));
      EXPECT_TRUE(SameBits(got_grad, Narrow(eGrad32.Host(), p)));
      // Across backends: the fp32 classifier test's kTol (exp and sums in another order), and
      // one ulp for the rounded gradient.
      EXPECT_LE(RelErr(eLoss.Host(), losses), kTol);
      EXPECT_LE(RelErr(eFused.Host(), fused_losses), kTol);
      const double d = kTol * MaxAbs(grad32);
      EXPECT_TRUE(Within16(got_grad, grad, p, [&](size_t) { return d; }));

      for (int ranks : {2, 3}) {
        if (V < ranks) continue;
        std::vector<float> all_cpu(static_cast<size_t>(ranks) * N * 3), all_be(all_cpu.size());
        std::vector<std::vector<uint16_t>> slices;
        for (int r = 0; r < ranks; ++r) {
          const int vb = V * r / ranks, ve = V * (r + 1) / ranks, w = ve - vb;
          std::vector<uint16_t> slice(static_cast<size_t>(N) * w);
          for (int i = 0; i < N; ++i) {
            std::copy_n(logits.data() + static_cast<size_t>(i) * V + vb, w, slice.data() + static_cast<size_t>(i) * w);
          }
          cpu().CrossEntropyShardStats(all_cpu.data() + static_cast<size_t>(r) * N * 3, CPtr(slice.data(), p),
                                       tgt.data(), N, w, vb);
          Dev<uint16_t> eSlice(be(), slice);
          Dev<float> eSliceW(be(), Widen(slice, p)), eStats(be(), static_cast<size_t>(N) * 3),
              eStats32(be(), static_cast<size_t>(N) * 3);
          be().CrossEntropyShardStats(eStats.get(), CPtr(eSlice.get(), p), eT.get(), N, w, vb);
          be().CrossEntropyShardStats(eStats32.get(), eSliceW.get(), eT.get(), N, w, vb);
          ASSERT_TRUE(Ok());
          const auto got = eStats.Host();
          EXPECT_TRUE(SameBits(got, eStats32.Host())) << "rank " << r << "'s stats: the fp32 op's";
          std::copy(got.begin(), got.end(), all_be.begin() + static_cast<ptrdiff_t>(r) * N * 3);
          slices.push_back(std::move(slice));
        }
        EXPECT_LE(RelErr(all_be, all_cpu), kTol) << ranks << " ranks' stats";
        Dev<float> eAll(be(), all_cpu);
        for (int r = 0; r < ranks; ++r) {
          const int vb = V * r / ranks, ve = V * (r + 1) / ranks, w = ve - vb;
          const auto& slice = slices[static_cast<size_t>(r)];
          std::vector<float> shard_losses(N), g32 = Widen(slice, p), shard32(N);
          std::vector<uint16_t> g = slice;
          cpu().CrossEntropyShardFinish(shard_losses.data(), Ptr(g.data(), p), all_cpu.data(), ranks, tgt.data(), dloss,
                                        N, w, vb);
          cpu().CrossEntropyShardFinish(shard32.data(), g32.data(), all_cpu.data(), ranks, tgt.data(), dloss, N, w, vb);
          Dev<uint16_t> eG(be(), slice);
          Dev<float> eSL(be(), N), eG32(be(), Widen(slice, p)), eSL32(be(), N);
          be().CrossEntropyShardFinish(eSL.get(), Ptr(eG.get(), p), eAll.get(), ranks, eT.get(), dloss, N, w, vb);
          be().CrossEntropyShardFinish(eSL32.get(), eG32.get(), eAll.get(), ranks, eT.get(), dloss, N, w, vb);
          ASSERT_TRUE(Ok());
          const auto got_g = eG.Host();
          EXPECT_TRUE(SameBits(eSL.Host(), eSL32.Host())) << "rank " << r << " of " << ranks;
          EXPECT_TRUE(SameBits(got_g, Narrow(eG32.Host(), p))) << "rank " << r << " of " << ranks;
          EXPECT_LE(RelErr(eSL.Host(), shard_losses), kTol) << "rank " << r << " of " << ranks;
          const double ds = kTol * MaxAbs(g32);
          EXPECT_TRUE(Within16(got_g, g, p, [&](size_t) { return ds; })) << "rank " << r << " of " << ranks;
          EXPECT_LE(RelErr(eSL.Host(), fused_losses), kTol) << "the split loss is the whole one";
        }
      }
    }
  }
}

// The element-type rule (kernels/backend.h, kernels::CheckTypes): tensors of one call that must
// share a type, or a 16-bit output of other inputs, are an INVALID_ARGUMENT naming the op and
// the backend; the op writes nothing.
TEST_F(BackendOpsTest, AnIllegalTypeMixIsAnErrorNamingTheOp) {
  constexpr Precision kBf = Precision::kBf16, kHf = Precision::kFp16;
  const size_t n = 64;
  Dev<uint16_t> a(be(), std::vector<uint16_t>(n, kPoison16)), bb(be(), Random16(n, 1, kBf)),
      c(be(), Random16(n, 2, kBf)), d(be(), Random16(n, 3, kBf));
  Dev<float> f(be(), Random(n, 4)), g(be(), n), s(be(), 4 * n);
  struct Case {
    const char* op;
    std::function<void()> call;
  };
  const Case cases[] = {
      {"MatmulForward", [&] { be().MatmulForward(Ptr(a.get(), kHf), CPtr(bb.get(), kBf), CPtr(c.get(), kBf), nullptr, 4, 4, 4); }},
      {"MatmulForward", [&] { be().MatmulForward(Ptr(a.get(), kBf), CPtr(bb.get(), kBf), CPtr(c.get(), kHf), nullptr, 4, 4, 4); }},
      {"MatmulForward", [&] { be().MatmulForward(Ptr(a.get(), kBf), f.get(), f.get(), nullptr, 4, 4, 4); }},
      {"MatmulForward", [&] { be().MatmulForward(g.get(), CPtr(bb.get(), kBf), CPtr(c.get(), kBf), f.get(), 4, 4, 4); }},
      {"MatmulBiasGeluForward",
       [&] { be().MatmulBiasGeluForward(g.get(), Ptr(a.get(), kBf), CPtr(bb.get(), kBf), CPtr(c.get(), kBf), CPtr(d.get(), kBf), 4, 4, 4); }},
      {"MatmulBackward",
       [&] { be().MatmulBackward(Ptr(a.get(), kHf), g.get(), nullptr, CPtr(bb.get(), kBf), CPtr(c.get(), kBf), CPtr(d.get(), kBf), 4, 4, 4); }},
      {"MatmulBackward",
       [&] { be().MatmulBackward(g.get(), s.get(), nullptr, CPtr(bb.get(), kBf), CPtr(c.get(), kBf), CPtr(d.get(), kBf), 4, 4, 4,
                                 WeightLayout::kInOut, CPtr(a.get(), kHf)); }},
      {"AttentionForward", [&] { be().AttentionForward(Ptr(a.get(), kBf), s.get(), f.get(), 1, 4, 4, 1, kBf); }},
      {"AttentionBackward",
       [&] { be().AttentionBackward(Ptr(a.get(), kBf), s.get(), CPtr(bb.get(), kBf), CPtr(c.get(), kBf), CPtr(d.get(), kHf), s.get(), 1, 4, 4, 1); }},
      {"GeluForward", [&] { be().GeluForward(Ptr(a.get(), kBf), CPtr(bb.get(), kHf), 16); }},
      {"GeluForward", [&] { be().GeluForward(g.get(), CPtr(bb.get(), kBf), 16); }},
      {"GeluBackward", [&] { be().GeluBackward(Ptr(a.get(), kBf), CPtr(bb.get(), kBf), f.get(), 16); }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.op);
    k.call();
    const absl::Status st = be().Synchronize();
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_NE(st.message().find(k.op), std::string::npos) << st;
    EXPECT_NE(st.message().find(be().Describe()), std::string::npos) << st;
  }
  EXPECT_TRUE(SameBits(a.Host(), std::vector<uint16_t>(n, kPoison16))) << "nothing written";
  EXPECT_TRUE(SameBits(g.Host(), std::vector<float>(n, NAN))) << "nothing written";
}

// Context parallelism's ring (model::RingAttention) runs on these ops on every backend: a
// query block against two key/value blocks (the diagonal one, causal, written over whatever
// out and lse hold; then one wholly below the diagonal, merged by the log-sum-exps), D, and
// the blocks' backward added into gradients that hold values already, each a strided view
// inside wider rows as the ring passes them (q in q|k|v rows, k and v in a travelling K/V
// block). Heads grouped, multi-head and multi-query; head sizes that fill a warp's lanes
// partly, once, and four times; rows that are multiples of no tile. "Emulated": on the unit
// build the CUDA emulator runs the kernels (TSan leaves it out).
TEST_F(BackendOpsTest, RingBlockAttentionAndRopeAtPositionsMatchTheCpuBackendEmulated) {
  for (auto [B, NH, NKV, hd, L, Lk] : {std::tuple{1, 1, 1, 8, 1, 3}, std::tuple{2, 4, 2, 8, 7, 5},
                                       std::tuple{1, 6, 3, 64, 33, 65}, std::tuple{2, 2, 1, 128, 9, 17},
                                       std::tuple{1, 3, 1, 24, 40, 12}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B << " NH " << NH << " NKV " << NKV << " hd " << hd << " L " << L
                                      << " Lk " << Lk);
    const int W = (NH + 2 * NKV) * hd, C = NH * hd, KV = 2 * NKV * hd;
    const size_t nq = static_cast<size_t>(B) * L * W, no = static_cast<size_t>(B) * L * C,
                 ns = static_cast<size_t>(B) * NH * L;
    // qkv rows of this block (its own K/V for the diagonal), and a K/V block of Lk rows.
    const auto qkv = Random(nq, 21), kvb = Random(static_cast<size_t>(B) * Lk * KV, 22), dout = Random(no, 23),
               dq0 = Random(nq, 24), dkv0 = Random(static_cast<size_t>(B) * Lk * KV, 25),
               held = Random(no, 26);  // what out holds before the first block: overwritten
    const std::vector<float> held_lse(ns, 0.5f);
    const AttentionBlock diag{B, NH, NKV, hd, L, L, true, 0.f, /*first=*/true};
    const AttentionBlock below{B, NH, NKV, hd, L, Lk, false, 0.f};
    auto run = [&](Backend& be, float* out, float* lse, const float* q, const float* kv, float* D, float* dq,
                   float* dkv, const float* g) {
      const HeadRows<const float> qr{q, static_cast<int64_t>(L) * W, W};
      const HeadRows<const float> kd{q + C, qr.seq, W}, vd{q + C + NKV * hd, qr.seq, W};
      const HeadRows<const float> kb{kv, static_cast<int64_t>(Lk) * KV, KV}, vb{kv + NKV * hd, kb.seq, KV};
      const HeadRows<float> o{out, static_cast<int64_t>(L) * C, C};
      be.AttentionBlockForward(o, {lse, L}, qr, kd, vd, diag);
      be.AttentionBlockForward(o, {lse, L}, qr, kb, vb, below);
      const HeadRows<const float> oc{out, o.seq, C}, gr{g, o.seq, C};
      be.AttentionBlockDelta({D, L}, gr, oc, B, NH, hd, L);
      // The diagonal block's gradients go to q|k|v's own columns, the other's to the K/V block.
      float* dqr = dq;
      const HeadRows<float> dqh{dqr, qr.seq, W};
      be.AttentionBlockBackward(dqh, {dqr + C, qr.seq, W}, {dqr + C + NKV * hd, qr.seq, W}, qr, kd, vd, gr, oc,
                                {lse, L}, {D, L}, {B, NH, NKV, hd, L, L, true, 0.f});
      be.AttentionBlockBackward(dqh, {dkv, kb.seq, KV}, {dkv + NKV * hd, kb.seq, KV}, qr, kb, vb, gr, oc, {lse, L},
                                {D, L}, below);
    };
    std::vector<float> out = held, lse = held_lse, D(ns), dq = dq0, dkv = dkv0;
    run(cpu(), out.data(), lse.data(), qkv.data(), kvb.data(), D.data(), dq.data(), dkv.data(), dout.data());
    Dev<float> eQ(be(), qkv), eKv(be(), kvb), eG(be(), dout), eOut(be(), held), eLse(be(), held_lse), eD(be(), ns),
        eDq(be(), dq0), eDkv(be(), dkv0);
    run(be(), eOut.get(), eLse.get(), eQ.get(), eKv.get(), eD.get(), eDq.get(), eDkv.get(), eG.get());
    ASSERT_TRUE(Ok());
    EXPECT_LE(RelErr(eOut.Host(), out), kTol);
    EXPECT_LE(RelErr(eLse.Host(), lse), kTol);
    EXPECT_LE(RelErr(eD.Host(), D), kTol);
    EXPECT_LE(RelErr(eDq.Host(), dq), kTol);
    EXPECT_LE(RelErr(eDkv.Host(), dkv), kTol);
    // The cpu reference itself: two blocks merged are the softmax over the union of their keys
    // (the diagonal's keys j <= i, then all of the other's), computed here directly.
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    double worst = 0, largest = 0;
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        const int g = h / (NH / NKV);
        for (int i = 0; i < L; ++i) {
          const float* q = qkv.data() + (static_cast<size_t>(b) * L + i) * W + h * hd;
          std::vector<double> s, w;
          std::vector<const float*> vals;
          for (int j = 0; j <= i; ++j) {
            const float* row = qkv.data() + (static_cast<size_t>(b) * L + j) * W;
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += double(q[d]) * row[C + g * hd + d];
            s.push_back(dot * scale);
            vals.push_back(row + C + NKV * hd + g * hd);
          }
          for (int j = 0; j < Lk; ++j) {
            const float* row = kvb.data() + (static_cast<size_t>(b) * Lk + j) * KV;
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += double(q[d]) * row[g * hd + d];
            s.push_back(dot * scale);
            vals.push_back(row + NKV * hd + g * hd);
          }
          const double mx = *std::max_element(s.begin(), s.end());
          double sum = 0;
          for (double x : s) sum += std::exp(x - mx);
          const double want_lse = mx + std::log(sum);
          worst = std::max(worst, std::fabs(want_lse - lse[(static_cast<size_t>(b) * NH + h) * L + i]));
          for (int d = 0; d < hd; ++d) {
            double o = 0;
            for (size_t j = 0; j < s.size(); ++j) o += std::exp(s[j] - want_lse) * vals[j][d];
            const float got = out[(static_cast<size_t>(b) * L + i) * C + h * hd + d];
            worst = std::max(worst, std::fabs(o - got));
            largest = std::max(largest, std::fabs(o));
          }
        }
      }
    }
    EXPECT_LE(worst, kTol * std::max(1.0, largest)) << "the merged blocks are the softmax over both blocks' keys";
  }
  // RoPE at a cp rank's rows' positions (cp 2, rank 1 of T 16: chunks 1 and 2), and at
  // positions r, where it is RopeApply.
  for (auto [B, NH, NKV, hd] : {std::tuple{2, 4, 2, 8}, std::tuple{1, 2, 2, 64}}) {
    const int L = 8;
    const std::vector<int32_t> at = {4, 5, 6, 7, 8, 9, 10, 11}, plain = {0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<float> inv(static_cast<size_t>(hd / 2));
    rope_inv_freq(inv.data(), hd, 10000.f);
    const auto qkv0 = Random(static_cast<size_t>(B) * L * (NH + 2 * NKV) * hd, 31);
    for (const auto* pos : {&at, &plain}) {
      for (bool inverse : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "RoPE at positions from " << (*pos)[0] << " hd " << hd << " inverse "
                                          << inverse);
        std::vector<float> want = qkv0;
        cpu().RopeApplyAt(want.data(), B, L, pos->data(), NH, NKV, hd, inv.data(), inverse);
        Dev<float> eInv(be(), inv), eX(be(), qkv0);
        Dev<int32_t> eP(be(), *pos);
        be().RopeApplyAt(eX.get(), B, L, eP.get(), NH, NKV, hd, eInv.get(), inverse);
        ASSERT_TRUE(Ok());
        EXPECT_LE(RelErr(eX.Host(), want), kTol);
        if (pos == &plain) {
          std::vector<float> unsplit = qkv0;
          cpu().RopeApply(unsplit.data(), B, L, NH, NKV, hd, inv.data(), inverse);
          EXPECT_TRUE(SameBits(want, unsplit)) << "positions r: RopeApply's bits";
        }
      }
    }
  }
  // CopyRows: the K/V columns of q|k|v rows packed, and back.
  {
    const int rows = 13, W = 40, off = 16, width = 24;
    const auto src = Random(static_cast<size_t>(rows) * W, 41);
    Dev<float> eS(be(), src), eP(be(), static_cast<size_t>(rows) * width), eBack(be(), src.size());
    be().CopyRows(eP.get(), width, eS.get() + off, W, width, rows);
    be().CopyRows(eBack.get() + off, W, eP.get(), width, width, rows);
    ASSERT_TRUE(Ok());
    const auto packed = eP.Host(), back = eBack.Host();
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < W; ++c) {
        const float x = src[static_cast<size_t>(r) * W + c];
        if (c >= off) {
          EXPECT_EQ(packed[static_cast<size_t>(r) * width + c - off], x) << r << "," << c;
          EXPECT_EQ(back[static_cast<size_t>(r) * W + c], x) << r << "," << c;
        } else {
          EXPECT_TRUE(std::isnan(back[static_cast<size_t>(r) * W + c])) << "untouched: " << r << "," << c;
        }
      }
    }
  }
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
  // Each batch's stride covers its matrix stored either way (A: m or k columns of lda, B: n
  // or k columns of ldb) and a gap. (B's was ldb * n + 1, short of op(B) = B^T's k columns:
  // the last batch's read ran past the buffer, found by ASan.)
  const long long sa = lda * std::max(m, k) + 2, sb = ldb * std::max(n, k) + 1, sc = ldc * n + 3;
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


// One cublasLtMatmul, as kernels/cuda/matmul.cu makes it: D (m, n) = op(A) op(B) + beta C, C = D,
// A and B of type ab, D of type dt. describe(set) sets the descriptor's epilogue attributes
// before the heuristic is asked, after(set) between the heuristic and the matmul. align: the
// preference's minimum alignment of every matrix (0: not set, cuBLASLt's 256). The first status
// that is not success, of any call.
using LtSet = std::function<void(cublasLtMatmulDescAttributes_t, const void*, size_t)>;
cublasStatus_t LtMatmul(cublasLtHandle_t h, cudaDataType_t ab, cudaDataType_t dt, cublasOperation_t ta,
                        cublasOperation_t tb, int m, int n, int k, const void* A, int lda, const void* B, int ldb,
                        void* D, int ldd, float beta, uint32_t align, const std::function<void(const LtSet&)>& describe,
                        const std::function<void(const LtSet&)>& after = {}) {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasStatus_t st = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const LtSet set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t bytes) {
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(op, attr, v, bytes);
  };
  set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  describe(set);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&la, ab, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&lb, ab, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&ld, dt, m, n, ldd);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceCreate(&pref);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (st == CUBLAS_STATUS_SUCCESS && align != 0) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  }
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &result, &found);
  if (after) after(set);
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

// cublasLtMatmul with 16-bit types, as kernels/cuda/matmul.cu calls it: D (m, n) = op(A) B
// + beta C (+ bias), C = D. align: as LtMatmul's.
cublasStatus_t Lt(cublasLtHandle_t h, cudaDataType_t ab, cudaDataType_t dt, cublasOperation_t ta, int m, int n, int k,
                  const void* A, int lda, const void* B, int ldb, void* D, int ldd, float beta, const void* bias,
                  uint32_t align = 0) {
  return LtMatmul(h, ab, dt, ta, CUBLAS_OP_N, m, n, k, A, lda, B, ldb, D, ldd, beta, align, [&](const LtSet& set) {
    if (bias == nullptr) return;
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
  });
}

// 16-bit A and B (bf16, fp16) into an fp32 or same-type D, with and without C (beta 1 or 0: C
// not read) and a bias of D's type (a 16-bit D's added to the rounded product, as on an H200),
// against a loop from the definition (exact products, sums
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
              auto half_ulp = [&](double v) {  // of a 16-bit value
                int e = 0;
                std::frexp(std::max(std::fabs(v), 1e-30), &e);
                return std::ldexp(1.0, std::max(e - 1, p == Precision::kBf16 ? -126 : -14) -
                                           (p == Precision::kBf16 ? 8 : 11));
              };
              double tol = (k + 2) * 0x1p-24 * s;
              if (d16 && (with_bias || beta != 0.f)) {
                // A 16-bit D's C and bias, as cuBLAS 13 adds them on an H200: to the product
                // already rounded to 16 bits, the sum rounded again.
                const double added = c_at(i, j) + bias_at(i);
                const double first = kernels::FloatOf16(kernels::Of16(static_cast<float>(want - added), p), p);
                EXPECT_LE(std::fabs(got - (first + added)),
                          half_ulp(got) + 0x1p-22 * (std::fabs(first) + std::fabs(c_at(i, j)) + std::fabs(bias_at(i))))
                    << "D(" << i << ", " << j << "): C and the bias added to the rounded product";
                tol = (k + 2) * 0x1p-24 * s + half_ulp(first) + half_ulp(got);
              } else if (d16) {  // and half an ulp of the 16-bit result
                tol += half_ulp(got);
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

// An fp32 cublasLtMatmul D (m, n) = op(A) op(B) with epilogue epi, its bias (or bias gradient)
// and aux (ld aux_ld) pointers set before the heuristic is asked (aux_at_heuristic: another aux
// pointer then, as a plan made for one address and reused). The first status that is not success.
cublasStatus_t LtEpilogue(cublasLtHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                          const float* A, int lda, const float* B, int ldb, float* D, int ldd, cublasLtEpilogue_t epi,
                          void* bias, void* aux, int64_t aux_ld, void* aux_at_heuristic) {
  return LtMatmul(
      h, CUDA_R_32F, CUDA_R_32F, ta, tb, m, n, k, A, lda, B, ldb, D, ldd, 0.f, /*align=*/4,  // host vectors
      [&](const LtSet& set) {
        set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
        set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux_at_heuristic, sizeof(aux_at_heuristic));
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld));
      },
      [&](const LtSet& set) { set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)); });
}

// The GELU and bias-gradient epilogues, fp32, against loops from their definitions (sums in
// double; fp32 sums within (k + 1) 2^-24 of the sum of magnitudes, GELU's fp32 evaluation
// within kTol): GELU_AUX_BIAS writes aux = x = the product + bias and D = gelu(x); DGELU_BGRAD
// D = gelu'(aux) times the product and the bias gradient D's row sums; BGRADA the row sums of
// op(A) and BGRADB the column sums of op(B), each transposed and not. And the arguments
// cuBLASLt documents: the aux leading dimension a multiple of 8 and no less than D's rows, the
// aux and bias pointers set, and no less aligned than when the heuristic was asked.
TEST(EmulatedRuntimeTest, LtGeluAndBiasGradEpiloguesKeepCublasLtContract) {
  const int m = 16, n = 3, k = 5, ldd = 16;
  cublasLtHandle_t h;
  ASSERT_EQ(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
  const auto A = Random(static_cast<size_t>(m) * k, 1), B = Random(static_cast<size_t>(k) * n, 2),
             bias = Random(m, 3), pre = Random(static_cast<size_t>(ldd) * n, 4);
  auto opA = [&](cublasOperation_t t, int i, int q) { return A[t == CUBLAS_OP_N ? q * m + i : i * k + q]; };
  auto opB = [&](cublasOperation_t t, int q, int j) { return B[t == CUBLAS_OP_N ? j * k + q : q * n + j]; };
  auto product = [&](cublasOperation_t ta, cublasOperation_t tb, int i, int j, double* mag) {
    double s = 0;
    *mag = 0;
    for (int q = 0; q < k; ++q) {
      const double t = static_cast<double>(opA(ta, i, q)) * opB(tb, q, j);
      s += t;
      *mag += std::fabs(t);
    }
    return s;
  };
  const double u = 0x1p-24;
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      SCOPED_TRACE(::testing::Message() << (ta == CUBLAS_OP_T ? "A^T" : "A") << (tb == CUBLAS_OP_T ? " B^T" : " B"));
      const int lda = ta == CUBLAS_OP_N ? m : k, ldb = tb == CUBLAS_OP_N ? k : n;
      std::vector<float> D(static_cast<size_t>(ldd) * n), aux(static_cast<size_t>(ldd) * n, NAN), bg(m, NAN),
          bgb(n, NAN);
      // GELU_AUX_BIAS
      ASSERT_EQ(LtEpilogue(h, ta, tb, m, n, k, A.data(), lda, B.data(), ldb, D.data(), ldd,
                           CUBLASLT_EPILOGUE_GELU_AUX_BIAS, const_cast<float*>(bias.data()), aux.data(), ldd, aux.data()),
                CUBLAS_STATUS_SUCCESS);
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) {
          double mag = 0;
          const double x = product(ta, tb, i, j, &mag) + bias[i];
          const double tol = (k + 1) * u * (mag + std::fabs(bias[i]));
          EXPECT_NEAR(aux[j * ldd + i], x, tol) << "aux (" << i << ", " << j << ")";
          EXPECT_NEAR(D[j * ldd + i], kernels::GeluOf(x), 1.13 * tol + kTol) << "D (" << i << ", " << j << ")";
        }
      }
      // DGELU_BGRAD: D = gelu'(pre) times the product; the bias gradient D's row sums.
      ASSERT_EQ(LtEpilogue(h, ta, tb, m, n, k, A.data(), lda, B.data(), ldb, D.data(), ldd, CUBLASLT_EPILOGUE_DGELU_BGRAD,
                           bg.data(), const_cast<float*>(pre.data()), ldd, const_cast<float*>(pre.data())),
                CUBLAS_STATUS_SUCCESS);
      for (int i = 0; i < m; ++i) {
        double want_bg = 0, tol_bg = 0;
        for (int j = 0; j < n; ++j) {
          double mag = 0;
          const double gg = kernels::GeluGradOf(pre[j * ldd + i]), d = gg * product(ta, tb, i, j, &mag);
          const double tol = std::fabs(gg) * (k + 1) * u * mag + kTol * mag;
          EXPECT_NEAR(D[j * ldd + i], d, tol) << "D (" << i << ", " << j << ")";
          want_bg += d;
          tol_bg += tol + n * u * std::fabs(d);
        }
        EXPECT_NEAR(bg[i], want_bg, tol_bg) << "the bias gradient " << i;
      }
      // BGRADA: op(A)'s row sums; BGRADB: op(B)'s column sums. D the product.
      ASSERT_EQ(LtEpilogue(h, ta, tb, m, n, k, A.data(), lda, B.data(), ldb, D.data(), ldd, CUBLASLT_EPILOGUE_BGRADA,
                           bg.data(), nullptr, 0, nullptr),
                CUBLAS_STATUS_SUCCESS);
      ASSERT_EQ(LtEpilogue(h, ta, tb, m, n, k, A.data(), lda, B.data(), ldb, D.data(), ldd, CUBLASLT_EPILOGUE_BGRADB,
                           bgb.data(), nullptr, 0, nullptr),
                CUBLAS_STATUS_SUCCESS);
      for (int i = 0; i < m; ++i) {
        double s = 0, mag = 0;
        for (int q = 0; q < k; ++q) s += opA(ta, i, q), mag += std::fabs(opA(ta, i, q));
        EXPECT_NEAR(bg[i], s, k * u * mag) << "BGRADA " << i;
      }
      for (int j = 0; j < n; ++j) {
        double s = 0, mag = 0;
        for (int q = 0; q < k; ++q) s += opB(tb, q, j), mag += std::fabs(opB(tb, q, j));
        EXPECT_NEAR(bgb[j], s, k * u * mag) << "BGRADB " << j;
        for (int i = 0; i < m; ++i) {
          double pm = 0;
          const double want = product(ta, tb, i, j, &pm);
          EXPECT_NEAR(D[j * ldd + i], want, (k + 1) * u * pm) << "D (" << i << ", " << j << ")";
        }
      }
    }
  }
  // The arguments.
  std::vector<float> D(static_cast<size_t>(ldd) * n), aux(static_cast<size_t>(ldd) * n + 8), bg(m);
  auto gelu = [&](int64_t aux_ld, float* aux_ptr, float* at_heuristic, float* bias_ptr) {
    return LtEpilogue(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, A.data(), m, B.data(), k, D.data(), ldd,
                      CUBLASLT_EPILOGUE_GELU_AUX_BIAS, bias_ptr, aux_ptr, aux_ld, at_heuristic);
  };
  float* b = const_cast<float*>(bias.data());
  float* aligned = aux.data();
  while (reinterpret_cast<uintptr_t>(aligned) % 16 != 0) ++aligned;
  EXPECT_EQ(gelu(ldd, aligned, aligned, b), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(gelu(ldd + 4, aligned, aligned, b), CUBLAS_STATUS_INVALID_VALUE) << "aux ld not a multiple of 8";
  EXPECT_EQ(gelu(8, aligned, aligned, b), CUBLAS_STATUS_INVALID_VALUE) << "aux ld under D's 16 rows";
  EXPECT_EQ(gelu(ldd, nullptr, aligned, b), CUBLAS_STATUS_INVALID_VALUE) << "no aux pointer";
  EXPECT_EQ(gelu(ldd, aligned, aligned, nullptr), CUBLAS_STATUS_INVALID_VALUE) << "no bias pointer";
  EXPECT_EQ(gelu(ldd, aligned + 1, aligned, b), CUBLAS_STATUS_INVALID_VALUE)
      << "an aux less aligned than the one the heuristic saw";
  EXPECT_EQ(gelu(ldd, aligned + 1, aligned + 1, b), CUBLAS_STATUS_SUCCESS) << "told its alignment";
  EXPECT_EQ(LtEpilogue(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, A.data(), m, B.data(), k, D.data(), ldd,
                       CUBLASLT_EPILOGUE_BGRADA, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE)
      << "no bias gradient pointer";
  cublasLtDestroy(h);
}

}  // namespace
}  // namespace gantry::emucuda
