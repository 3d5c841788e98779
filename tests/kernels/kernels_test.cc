// Each CPU kernel against PyTorch (float64 reference from tests/reference/make_fixtures.py).
#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <tuple>

#include "kernels/adamw.h"
#include "kernels/cast.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "tests/test_util.h"

namespace gantry::kernels {
namespace {

using testing::F32;
using testing::I32;
using testing::RelErr;

// fp32 against a float64 reference from the same fp32 inputs: the only error is our rounding.
// An n-term sum is off by at most n u (u = 2^-24) of its terms' magnitudes (Higham, Accuracy
// and Stability, 3.1); the longest sums here are attention_long's T = 150: 8.9e-6 < kTol.
// (The random-rounding estimate sqrt(n) u = 7e-7 is what is measured.)
constexpr double kTol = 1e-5;

class KernelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { fx_ = new SafetensorsFile(testing::OpenFixture("kernels.safetensors")); }
  static void TearDownTestSuite() { delete fx_; }
  static SafetensorsFile* fx_;
  std::vector<float> F(const std::string& n) { return F32(*fx_, n); }
};
SafetensorsFile* KernelsTest::fx_ = nullptr;

TEST_F(KernelsTest, EncoderForwardBackwardMatchesTorch) {
  const int B = 3, T = 7, V = 17, C = 12, NP = 10;
  auto inp = I32(*fx_, "encoder.inp");
  auto wte = F("encoder.wte"), wpe = F("encoder.wpe"), dout = F("encoder.dout");
  std::vector<float> out(B * T * C, NAN), dwte(V * C, 0.f), dwpe(NP * C, 0.f);
  encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
  EXPECT_LE(RelErr(out, F("encoder.out")), kTol);
  EXPECT_LE(RelErr(dwte, F("encoder.dwte")), kTol);
  EXPECT_LE(RelErr(dwpe, F("encoder.dwpe")), kTol);
}

TEST_F(KernelsTest, LayerNormForwardBackwardMatchesTorch) {
  const int N = 7, C = 37;
  auto x = F("layernorm.inp"), w = F("layernorm.weight"), b = F("layernorm.bias"), dout = F("layernorm.dout");
  std::vector<float> out(N * C, NAN), mean(N, NAN), rstd(N, NAN);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  EXPECT_LE(RelErr(out, F("layernorm.out")), kTol);
  EXPECT_LE(RelErr(mean, F("layernorm.mean")), kTol);
  EXPECT_LE(RelErr(rstd, F("layernorm.rstd")), kTol);
  std::vector<float> dx(N * C, 0.f), dw(C, 0.f), db(C, 0.f);
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  EXPECT_LE(RelErr(dx, F("layernorm.dinp")), kTol);
  EXPECT_LE(RelErr(dw, F("layernorm.dweight")), kTol);
  EXPECT_LE(RelErr(db, F("layernorm.dbias")), kTol);
}

TEST_F(KernelsTest, LayerNormBackwardAccumulatesIntoAllOutputs) {
  const int N = 7, C = 37;
  auto x = F("layernorm.inp"), w = F("layernorm.weight"), b = F("layernorm.bias"), dout = F("layernorm.dout");
  std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C, 0.f), dw(C, 0.f), db(C, 0.f);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  for (int rep = 0; rep < 2; ++rep) {
    layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  }
  for (const char* name : {"layernorm.dinp", "layernorm.dweight", "layernorm.dbias"}) {
    auto want = F(name);
    for (float& v : want) v *= 2;
    const auto& got = std::string(name) == "layernorm.dinp" ? dx : std::string(name) == "layernorm.dweight" ? dw : db;
    EXPECT_LE(RelErr(got, want), kTol) << name;
  }
}

TEST_F(KernelsTest, MatmulConv1DLayoutMatchesTorch) {
  const int N = 13, C = 29, OC = 31;
  auto x = F("matmul.inp"), w = F("matmul.weight"), b = F("matmul.bias"), dout = F("matmul.dout");
  std::vector<float> out(N * OC, NAN), dx(N * C, NAN), dw(C * OC, 0.f), db(OC, 0.f);
  matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
  matmul_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), N, C, OC);
  EXPECT_LE(RelErr(out, F("matmul.out")), kTol);
  EXPECT_LE(RelErr(dx, F("matmul.dinp")), kTol);
  EXPECT_LE(RelErr(dw, F("matmul.dweight")), kTol);
  EXPECT_LE(RelErr(db, F("matmul.dbias")), kTol);
}

TEST_F(KernelsTest, MatmulLinearLayoutMatchesTorch) {
  const int N = 13, C = 29, OC = 31;
  auto x = F("matmul.inp"), w = F("matmul_t.weight"), dout = F("matmul.dout");
  std::vector<float> out(N * OC, NAN), dx(N * C, NAN), dw(OC * C, 0.f);
  matmul_forward(out.data(), x.data(), w.data(), nullptr, N, C, OC, WeightLayout::kOutIn);
  matmul_backward(dx.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(), N, C, OC, WeightLayout::kOutIn);
  EXPECT_LE(RelErr(out, F("matmul_t.out")), kTol);
  EXPECT_LE(RelErr(dx, F("matmul_t.dinp")), kTol);
  EXPECT_LE(RelErr(dw, F("matmul_t.dweight")), kTol);
}

TEST_F(KernelsTest, MatmulWeightGradientAccumulates) {
  const int N = 13, C = 29, OC = 31;
  auto x = F("matmul.inp"), w = F("matmul.weight"), dout = F("matmul.dout");
  std::vector<float> dw(C * OC, 0.f), db(OC, 0.f);
  matmul_backward(nullptr, dw.data(), db.data(), dout.data(), x.data(), w.data(), N, C, OC);
  matmul_backward(nullptr, dw.data(), db.data(), dout.data(), x.data(), w.data(), N, C, OC);
  auto want = F("matmul.dweight");
  for (float& v : want) v *= 2;
  EXPECT_LE(RelErr(dw, want), kTol);
}

TEST(MatmulGeluFusionTest, FusedForwardAndBackwardGiveTheUnfusedBits) {
  const int N = 70, C = 24, OC = 96;  // large enough to take the threaded path
  std::vector<float> x(N * C), w(C * OC), b(OC), w2(OC * C), dy(N * C);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.2f * std::cos(0.11f * i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * std::sin(1.3f * i);
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = 0.2f * std::sin(0.07f * i + 1);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = std::cos(0.23f * i);
  std::vector<float> pre(N * OC), act(N * OC), pre2(N * OC, NAN), act2(N * OC, NAN);
  matmul_forward(pre.data(), x.data(), w.data(), b.data(), N, C, OC);
  gelu_forward(act.data(), pre.data(), N * OC);
  matmul_bias_gelu_forward(pre2.data(), act2.data(), x.data(), w.data(), b.data(), N, C, OC);
  EXPECT_EQ(pre, pre2);
  EXPECT_EQ(act, act2);
  // Backward of the second projection (OC -> C) into the GELU.
  std::vector<float> dact(N * OC), dw(OC * C, 0.f), db(C, 0.f), dact2(N * OC, NAN), dw2(OC * C, 0.f), db2(C, 0.f);
  matmul_backward(dact.data(), dw.data(), db.data(), dy.data(), act.data(), w2.data(), N, OC, C);
  gelu_backward(dact.data(), pre.data(), dact.data(), N * OC);
  matmul_backward(dact2.data(), dw2.data(), db2.data(), dy.data(), act.data(), w2.data(), N, OC, C,
                  WeightLayout::kInOut, pre.data());
  EXPECT_EQ(dact, dact2);
  EXPECT_EQ(dw, dw2);
  EXPECT_EQ(db, db2);
}

void CheckAttention(SafetensorsFile& fx, const std::string& tag) {
  auto shape = I32(fx, tag + ".shape");
  const int B = shape[0], T = shape[1], C = shape[2], NH = shape[3];
  auto qkv = F32(fx, tag + ".qkv"), dout = F32(fx, tag + ".dout");
  std::vector<float> out(B * T * C, NAN), att(B * NH * T * T, NAN), dqkv(B * T * 3 * C, NAN),
      scratch(B * NH * T * T, NAN);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  EXPECT_LE(RelErr(out, F32(fx, tag + ".out")), kTol) << tag;
  EXPECT_LE(RelErr(dqkv, F32(fx, tag + ".dqkv")), kTol) << tag;
  std::vector<float> lse(static_cast<size_t>(B) * NH * T, NAN);
  attention_lse(lse.data(), qkv.data(), B, T, C, NH);
  EXPECT_LE(RelErr(lse, F32(fx, tag + ".lse")), kTol) << tag << ": the rows' log-sum-exp";
  // Probabilities: rows sum to 1, zero above the diagonal.
  for (int bh = 0; bh < B * NH; ++bh) {
    for (int t = 0; t < T; ++t) {
      double s = 0;
      for (int u = 0; u < T; ++u) {
        const float p = att[(static_cast<size_t>(bh) * T + t) * T + u];
        if (u > t) {
          ASSERT_EQ(p, 0.f);
        }
        s += p;
      }
      ASSERT_NEAR(s, 1.0, 1e-5);
    }
  }
}

TEST_F(KernelsTest, AttentionMatchesTorch) { CheckAttention(*fx_, "attention"); }
TEST_F(KernelsTest, AttentionLongerThanOneRowBlockMatchesTorch) { CheckAttention(*fx_, "attention_long"); }

TEST_F(KernelsTest, GeluMatchesTorch) {
  auto x = F("gelu.inp"), dout = F("gelu.dout");
  std::vector<float> out(x.size(), NAN), dx(x.size(), NAN);
  gelu_forward(out.data(), x.data(), static_cast<int64_t>(x.size()));
  gelu_backward(dx.data(), x.data(), dout.data(), static_cast<int64_t>(x.size()));
  EXPECT_LE(RelErr(out, F("gelu.out")), kTol);
  EXPECT_LE(RelErr(dx, F("gelu.dinp")), kTol);
}

TEST_F(KernelsTest, FusedCrossEntropyMatchesTorch) {
  const int N = 11, V = 53;
  auto logits = F("crossentropy.logits");
  auto tg = I32(*fx_, "crossentropy.targets");
  std::vector<float> losses(N, NAN), losses2(N, NAN);
  crossentropy_forward(losses.data(), logits.data(), tg.data(), N, V);
  EXPECT_LE(RelErr(losses, F("crossentropy.losses")), kTol);
  crossentropy_fused_forward_backward(losses2.data(), logits.data(), tg.data(), 1.0f / N, N, V);
  EXPECT_LE(RelErr(losses2, F("crossentropy.losses")), kTol);
  EXPECT_LE(RelErr(logits, F("crossentropy.dlogits")), kTol);
}

TEST_F(KernelsTest, AdamWThreeStepsMatchTorch) {
  auto p = F("adamw.p0");
  std::vector<float> m(p.size(), 0.f), v(p.size(), 0.f);
  for (int step = 1; step <= 3; ++step) {
    auto g = F("adamw.g" + std::to_string(step));
    adamw_update(p.data(), g.data(), m.data(), v.data(), static_cast<int64_t>(p.size()),
                 {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step});
  }
  EXPECT_LE(RelErr(p, F("adamw.p3")), kTol);
  EXPECT_LE(RelErr(m, F("adamw.m3")), kTol);
  EXPECT_LE(RelErr(v, F("adamw.v3")), kTol);
}

// Gradients of eps's size: each update is lr g / (|g|-ish + eps), where eps weighs as much as
// g. The inputs are exact fp32, so the same kTol holds.
// fp32 -> bf16 -> fp32 against PyTorch's .to(torch.bfloat16): random values over 80 binary
// orders of magnitude and the edges (ties both ways, the largest finite and overflow to
// inf, infinities, signed zeros, subnormals, NaN), bit for bit.
TEST_F(KernelsTest, Bf16CastsMatchTorchBitForBit) {
  const auto x = F("cast.x"), want = F("cast.bf16");
  ASSERT_EQ(x.size(), want.size());
  std::vector<uint16_t> b(x.size());
  std::vector<float> back(x.size());
  kernels::cast_to_bf16(b.data(), x.data(), static_cast<int64_t>(x.size()));
  kernels::cast_from_bf16(back.data(), b.data(), static_cast<int64_t>(b.size()));
  int nans = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(back[i])) << i;
      ++nans;
      continue;
    }
    uint32_t g, w;
    std::memcpy(&g, &back[i], 4);
    std::memcpy(&w, &want[i], 4);
    EXPECT_EQ(g, w) << "element " << i << ": " << x[i] << " -> " << back[i] << ", torch " << want[i];
  }
  EXPECT_EQ(nans, 1);
}

TEST_F(KernelsTest, AdamWWithGradientsNearEpsMatchesTorch) {
  auto p = F("adamw_eps.p0");
  std::vector<float> m(p.size(), 0.f), v(p.size(), 0.f);
  for (int step = 1; step <= 3; ++step) {
    auto g = F("adamw_eps.g" + std::to_string(step));
    adamw_update(p.data(), g.data(), m.data(), v.data(), static_cast<int64_t>(p.size()),
                 {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step});
  }
  EXPECT_LE(RelErr(p, F("adamw_eps.p3")), kTol);
}

TEST_F(KernelsTest, GradNormAndClipMatchTorch) {
  auto a = F("gradnorm.a"), b = F("gradnorm.b");
  const double norm = std::sqrt(sum_squares(a.data(), static_cast<int64_t>(a.size())) +
                                sum_squares(b.data(), static_cast<int64_t>(b.size())));
  const float want = F("gradnorm.norm")[0];
  EXPECT_LE(std::fabs(norm - want) / want, kTol);
  const float coef = clip_coefficient(norm, 10.0f);
  ASSERT_LT(coef, 1.0f);
  scale_inplace(a.data(), static_cast<int64_t>(a.size()), coef);
  scale_inplace(b.data(), static_cast<int64_t>(b.size()), coef);
  EXPECT_LE(RelErr(a, F("gradnorm.a_clipped")), kTol);
  EXPECT_LE(RelErr(b, F("gradnorm.b_clipped")), kTol);
  EXPECT_EQ(clip_coefficient(norm, 0.f), 1.0f);           // 0 = off
  EXPECT_EQ(clip_coefficient(1.0, 5.0f), 1.0f);           // under the limit
}

// Mixed precision (tests/reference/make_fixtures.py --only amp): rounding fp32 to bf16 and to
// fp16 against PyTorch's .to(dtype), bit for bit, over 50 binary orders of magnitude and the
// edges (fp16: its largest finite, the overflow threshold 65520 and beyond, its smallest
// normal and subnormals with ties both ways; bf16's as above; infinities, zeros, NaN).
class AmpKernelsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { fx_ = new SafetensorsFile(testing::OpenFixture("amp.safetensors")); }
  static void TearDownTestSuite() { delete fx_; }
  static SafetensorsFile* fx_;
  std::vector<float> F(const std::string& n) { return F32(*fx_, n); }
};
SafetensorsFile* AmpKernelsTest::fx_ = nullptr;

TEST_F(AmpKernelsTest, RoundingToBf16AndFp16MatchesTorchBitForBit) {
  const auto x = F("round.x");
  for (auto [name, p] : {std::pair{"bf16", Precision::kBf16}, std::pair{"fp16", Precision::kFp16}}) {
    const auto want = F(std::string("round.") + name);
    ASSERT_EQ(want.size(), x.size());
    std::vector<float> got(x.size());
    round_to(got.data(), x.data(), static_cast<int64_t>(x.size()), p);
    int nans = 0, infs = 0, subnormal = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << name << " element " << i;
        ++nans;
        continue;
      }
      infs += std::isinf(want[i]) && !std::isinf(x[i]);
      subnormal += p == Precision::kFp16 && want[i] != 0 && std::fabs(want[i]) < 0x1p-14f;
      uint32_t g, w;
      std::memcpy(&g, &got[i], 4);
      std::memcpy(&w, &want[i], 4);
      EXPECT_EQ(g, w) << name << " element " << i << ": " << x[i] << " -> " << got[i] << ", torch " << want[i];
    }
    EXPECT_EQ(nans, 1) << name;
    EXPECT_GT(infs, 0) << name << ": the fixture overflows (fp16 from 65520, bf16 past 3.39e38)";
    if (p == Precision::kFp16) {
      EXPECT_GT(subnormal, 3) << "the fixture reaches fp16's subnormals";
    }
    std::vector<float> in_place = x;  // out == in
    round_to(in_place.data(), in_place.data(), static_cast<int64_t>(x.size()), p);
    EXPECT_EQ(std::memcmp(in_place.data(), got.data(), x.size() * 4), 0) << name;
  }
}

// One addmm and one GELU under torch.autocast: the inputs (and weight and bias) rounded to the
// 16-bit type, the fp32 GEMM (the products of 16-bit values are exact in fp32), the output
// rounded once. Where the two fp32 sums (29 terms, in different orders) straddle a rounding
// boundary the results differ by one unit of the 16-bit type: a sum is off by at most
// 29 x 2^-24 of its terms' magnitudes, a few 1e-6 relative here, so against bf16's 2^-8 and
// fp16's 2^-11 spacing a straddle takes a few elements in a thousand at most; we allow 5%.
// GELU's tanh form is the same story, plus its own fp32 error: for x well below 0 it is
// 0.5 x (1 + tanh(u)) with tanh(u) near -1, a cancellation that leaves an absolute error of a
// few fp32 ulps of 1 times |x| whichever tanh is used (PyTorch's and ours differ there), so
// GELU's bound adds 4 |x| 2^-24.
TEST_F(AmpKernelsTest, AutocastMatmulAndGeluMatchTorchToOneUnit) {
  const int N = 37, C = 29, OC = 41;
  for (auto [name, p, ulp] : {std::tuple{"bf16", Precision::kBf16, 0x1p-7}, std::tuple{"fp16", Precision::kFp16, 0x1p-10}}) {
    auto inp = F("matmul.inp"), w = F("matmul.weight"), b = F("matmul.bias");
    round_to(inp.data(), inp.data(), static_cast<int64_t>(inp.size()), p);
    round_to(w.data(), w.data(), static_cast<int64_t>(w.size()), p);
    round_to(b.data(), b.data(), static_cast<int64_t>(b.size()), p);
    std::vector<float> out(static_cast<size_t>(N) * OC);
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    round_to(out.data(), out.data(), static_cast<int64_t>(out.size()), p);
    auto gin = F("gelu.inp");
    round_to(gin.data(), gin.data(), static_cast<int64_t>(gin.size()), p);
    std::vector<float> gout(gin.size());
    gelu_forward(gout.data(), gin.data(), static_cast<int64_t>(gin.size()));
    round_to(gout.data(), gout.data(), static_cast<int64_t>(gout.size()), p);
    // The type's smallest spacing (its subnormals': bf16's is below any value here).
    const double min_unit = p == Precision::kFp16 ? 0x1p-24 : 0x1p-133;
    for (auto [what, got, want, x] : {std::tuple{"matmul", out, F(std::string("matmul.out_") + name), std::vector<float>()},
                                      std::tuple{"gelu", gout, F(std::string("gelu.out_") + name), gin}}) {
      ASSERT_EQ(got.size(), want.size());
      size_t equal = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        equal += got[i] == want[i];
        // One unit of the type at |want| (its spacing there: ulp x 2^exponent).
        const double unit =
            std::max(min_unit, ulp * std::exp2(std::floor(std::log2(std::max(std::fabs(want[i]), 1e-30f)))));
        const double formula = x.empty() ? 0 : 4 * std::fabs(x[i]) * 0x1p-24;
        EXPECT_LE(std::fabs(got[i] - want[i]), unit * 1.0001 + formula) << name << " " << what << " element " << i;
      }
      EXPECT_GE(static_cast<double>(equal), 0.95 * got.size()) << name << " " << what << ": " << equal << " of "
                                                               << got.size() << " bit for bit";
    }
  }
}

TEST(ResidualTest, ForwardAddsAndBackwardAccumulatesIntoBoth) {
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30}, out(3), da = {1, 1, 1}, db = {0, 0, 0},
                     dout = {0.5f, -1, 2};
  residual_forward(out.data(), a.data(), b.data(), 3);
  EXPECT_EQ(out, (std::vector<float>{11, 22, 33}));
  residual_backward(da.data(), db.data(), dout.data(), 3);
  EXPECT_EQ(da, (std::vector<float>{1.5f, 0, 3}));
  EXPECT_EQ(db, dout);
}

// The fp32 GEMMs cut their output by its shape alone (kernels/cpu/blocks.h), so forward and
// backward give the same bits at 1, 2 and 3 threads under any OpenBLAS kernel (Haswell's and
// Zen's sgemm give an element other bits in a call of another extent: per-thread slices were
// not enough). A shape of the test GPT-2 layer's qkv projection, both layouts.
TEST(MatmulTest, SameBitsWhateverTheThreadCount) {
  const int N = 2048, C = 384, OC = 1152;
  std::vector<float> x(static_cast<size_t>(N) * C), w(static_cast<size_t>(C) * OC), b(OC), dout(static_cast<size_t>(N) * OC);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(static_cast<float>(i) * 0.11f) * 0.05f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.01f * static_cast<float>(i % 7);
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = std::sin(static_cast<float>(i) * 0.013f) * 1e-2f;
  const int saved = omp_get_max_threads();
  for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
    std::vector<std::vector<float>> out, dinp, dw;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      out.emplace_back(static_cast<size_t>(N) * OC);
      dinp.emplace_back(static_cast<size_t>(N) * C);
      dw.emplace_back(static_cast<size_t>(C) * OC, 0.f);
      matmul_forward(out.back().data(), x.data(), w.data(), b.data(), N, C, OC, layout);
      matmul_backward(dinp.back().data(), dw.back().data(), nullptr, dout.data(), x.data(), w.data(), N, C, OC,
                      layout);
    }
    for (size_t k = 1; k < out.size(); ++k) {
      EXPECT_EQ(out[k], out[0]) << "forward, " << k + 1 << " threads";
      EXPECT_EQ(dinp[k], dinp[0]) << "dinp, " << k + 1 << " threads";
      EXPECT_EQ(dw[k], dw[0]) << "dweight, " << k + 1 << " threads";
    }
  }
  omp_set_num_threads(saved);
}

TEST(SumSquaresTest, SameBitsWhateverTheThreadCount) {
  std::vector<float> g(100003);
  for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(static_cast<float>(i)) * 1e-3f;
  omp_set_num_threads(1);
  const double one = sum_squares(g.data(), static_cast<int64_t>(g.size()));
  omp_set_num_threads(2);
  const double two = sum_squares(g.data(), static_cast<int64_t>(g.size()));
  EXPECT_EQ(one, two);
}

}  // namespace
}  // namespace gantry::kernels
