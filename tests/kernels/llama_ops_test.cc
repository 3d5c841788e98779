// The CPU ops of Llama-family blocks against PyTorch (tests/reference/make_fixtures.py --only
// llama_ops: float64 references from fp32 inputs), in fp32 and rounded to bf16.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cast.h"
#include "kernels/gqa.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/test_util.h"

namespace gantry::kernels {
namespace {

using testing::F32;
using testing::RelErr;

constexpr double kTol = 2e-6;

class LlamaOpsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { fx_ = new SafetensorsFile(testing::OpenFixture("llama_ops.safetensors")); }
  static void TearDownTestSuite() { delete fx_; }
  static SafetensorsFile* fx_;
  std::vector<float> F(const std::string& n) { return F32(*fx_, n); }
};
SafetensorsFile* LlamaOpsTest::fx_ = nullptr;

TEST_F(LlamaOpsTest, RMSNormForwardBackwardMatchesTorch) {
  const int N = 7, C = 37;
  auto x = F("rmsnorm.inp"), w = F("rmsnorm.weight"), dout = F("rmsnorm.dout");
  std::vector<float> out(N * C, NAN), rstd(N, NAN);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  EXPECT_LE(RelErr(out, F("rmsnorm.out")), kTol);
  EXPECT_LE(RelErr(rstd, F("rmsnorm.rstd")), kTol);
  // Backward accumulates: twice from zero is twice the gradient.
  std::vector<float> dx(N * C, 0.f), dw(C, 0.f);
  for (int rep = 0; rep < 2; ++rep) rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  for (float& v : dx) v *= 0.5f;
  for (float& v : dw) v *= 0.5f;
  EXPECT_LE(RelErr(dx, F("rmsnorm.dinp")), kTol);
  EXPECT_LE(RelErr(dw, F("rmsnorm.dweight")), kTol);
  // bf16 output: the fp32 value rounded.
  std::vector<uint16_t> out16(N * C);
  rmsnorm_forward(Ptr(out16.data(), Precision::kBf16), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  for (int i = 0; i < N * C; ++i) ASSERT_EQ(out16[i], Bf16Of(out[i])) << i;
}

TEST_F(LlamaOpsTest, RopeRotatesQueryAndKeyHeadsAsTransformersDoes) {
  const int B = 2, T = 5, NH = 6, NKV = 2, hd = 8;
  std::vector<float> inv(hd / 2);
  rope_inv_freq(inv.data(), hd, 500000.f);
  EXPECT_EQ(RelErr(inv, F("rope.inv_freq")), 0.0) << "HF's inv_freq, bit for bit";
  auto qkv = F("rope.qkv");
  rope_apply(qkv.data(), B, T, NH, NKV, hd, inv.data(), false);
  EXPECT_LE(RelErr(qkv, F("rope.out")), kTol);
  // The backward is the transposed rotation; the value heads pass through untouched.
  auto d = F("rope.dout");
  rope_apply(d.data(), B, T, NH, NKV, hd, inv.data(), true);
  EXPECT_LE(RelErr(d, F("rope.dqkv")), kTol);
  // Forward then inverse: the input back.
  auto again = F("rope.qkv");
  rope_apply(again.data(), B, T, NH, NKV, hd, inv.data(), false);
  rope_apply(again.data(), B, T, NH, NKV, hd, inv.data(), true);
  EXPECT_LE(RelErr(again, F("rope.qkv")), 1e-6);
}

TEST_F(LlamaOpsTest, SwigluForwardBackwardMatchesTorch) {
  const int N = 9, Fn = 13;
  auto gu = F("swiglu.gu"), dh = F("swiglu.dh");
  std::vector<float> h(N * Fn, NAN), dgu(N * 2 * Fn, NAN);
  swiglu_forward(h.data(), gu.data(), N, Fn);
  EXPECT_LE(RelErr(h, F("swiglu.h")), kTol);
  swiglu_backward(dgu.data(), dh.data(), gu.data(), N, Fn);
  EXPECT_LE(RelErr(dgu, F("swiglu.dgu")), kTol);
}

// Grouped-query attention as the expansion to multi-head attention's packed rows, the
// multi-head kernels, and the reduction of the gradient: transformers' eager attention with
// repeat_kv (6 query heads over 2 key/value heads).
TEST_F(LlamaOpsTest, GroupedQueryAttentionThroughTheMultiHeadKernelsMatchesTorch) {
  const int B = 2, T = 5, NH = 6, NKV = 2, hd = 4, C = NH * hd;
  const int64_t rows = B * T;
  auto qkv = F("gqa.qkv"), dout = F("gqa.dout");
  std::vector<float> qkv3(static_cast<size_t>(rows) * 3 * C, NAN), out(static_cast<size_t>(rows) * C, NAN),
      att(static_cast<size_t>(B) * NH * T * T), dqkv3(qkv3.size(), NAN), scratch(att.size()),
      dqkv(qkv.size(), NAN);
  gqa_expand(qkv3.data(), qkv.data(), rows, NH, NKV, hd);
  attention_forward(out.data(), att.data(), qkv3.data(), B, T, C, NH);
  EXPECT_LE(RelErr(out, F("gqa.out")), kTol);
  attention_backward(dqkv3.data(), scratch.data(), dout.data(), qkv3.data(), att.data(), B, T, C, NH);
  gqa_reduce(dqkv.data(), dqkv3.data(), rows, NH, NKV, hd);
  EXPECT_LE(RelErr(dqkv, F("gqa.dqkv")), kTol);
  // With NKV = NH the expansion is the identity.
  std::vector<float> same(static_cast<size_t>(rows) * 3 * C);
  gqa_expand(same.data(), qkv3.data(), rows, NH, NH, hd);
  EXPECT_EQ(same, qkv3);
  EXPECT_FALSE(CheckGroups("GqaExpand", 6, 4, 8).ok()) << "6 query heads cannot share 4 key/value heads";
}

TEST_F(LlamaOpsTest, SameBitsWhateverTheThreadCount) {
  const int N = 7, C = 37;
  auto x = F("rmsnorm.inp"), w = F("rmsnorm.weight"), dout = F("rmsnorm.dout");
  const int saved = omp_get_max_threads();
  std::vector<std::vector<float>> dws;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> out(N * C), rstd(N), dx(N * C, 0.f), dw(C, 0.f);
    rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
    dws.push_back(dw);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(dws[1], dws[0]);
  EXPECT_EQ(dws[2], dws[0]);
}

}  // namespace
}  // namespace gantry::kernels
