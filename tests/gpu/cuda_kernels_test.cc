// CUDA kernels against their CPU twins on fresh random inputs of several shapes, with the
// outputs poisoned (NaN) first so an unwritten element fails. CTest label `gpu`; run on a
// machine with an NVIDIA GPU by tests/gpu/run.sh (which sets GANTRY_REQUIRE_GPU=1, so a
// missing device is a failure there rather than a skip).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <tuple>
#include <vector>

#include "common/rng.h"
#include "kernels/adamw.h"
#include "kernels/attention.h"
#include "kernels/crossentropy.h"
#include "kernels/cuda/ops.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "tests/gpu/gpu_test.h"
#include "tests/test_util.h"

namespace gantry::cuda {
namespace {

using testing::RelErr;

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GANTRY_SKIP_WITHOUT_GPU();
    auto c = Context::Create(0);
    ASSERT_TRUE(c.ok()) << c.status();
    ctx_ = std::move(*c);
  }
  int32_t* UploadInts(const std::vector<int32_t>& h) {
    void* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, h.size() * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // see Upload
    ptrs_.push_back(static_cast<float*>(d));
    return static_cast<int32_t*>(d);
  }
  std::vector<int32_t> Tokens(size_t n, int V, uint64_t seed) {
    Rng r(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(r.NextU64() % static_cast<uint64_t>(V));
    return t;
  }
  std::unique_ptr<Context> ctx_;
  std::vector<float> Random(size_t n, uint64_t seed, float scale = 1.f) {
    Rng r(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(r.Normal()) * scale;
    return v;
  }
  float* Upload(const std::vector<float>& h) {
    float* d = nullptr;
    EXPECT_EQ(cudaMalloc(&d, h.size() * 4), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    // A copy from pageable memory returns once staged; the legacy stream it runs on does not
    // order the context's non-blocking stream, whose kernels could read (or a beta-1 GEMM add
    // to) the destination before the bytes land. Seen on an H200: dweight and dbias came back
    // as their starting values.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ptrs_.push_back(d);
    return d;
  }
  float* Poisoned(size_t n) { return Upload(std::vector<float>(n, NAN)); }
  std::vector<float> Download(const float* d, size_t n) {
    std::vector<float> h(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  void TearDown() override {
    ctx_.reset();
    for (float* p : ptrs_) cudaFree(p);
  }
  std::vector<float*> ptrs_;
};

TEST_F(CudaKernelsTest, GeluMatchesCpuTwin) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{4097}, size_t{1} << 20}) {
    auto x = Random(n, n, 3.f), dout = Random(n, n + 1);
    std::vector<float> out(n), dx(n);
    kernels::gelu_forward(out.data(), x.data(), static_cast<int64_t>(n));
    kernels::gelu_backward(dx.data(), x.data(), dout.data(), static_cast<int64_t>(n));
    float *dX = Upload(x), *dD = Upload(dout), *dO = Poisoned(n), *dG = Poisoned(n);
    ASSERT_TRUE(GeluForward(dO, dX, static_cast<int64_t>(n), nullptr).ok());
    ASSERT_TRUE(GeluBackward(dG, dX, dD, static_cast<int64_t>(n), nullptr).ok());
    EXPECT_LE(RelErr(Download(dO, n), out), 1e-5) << n;
    EXPECT_LE(RelErr(Download(dG, n), dx), 1e-5) << n;
  }
}

TEST_F(CudaKernelsTest, ResidualMatchesCpuTwin) {
  for (size_t n : {size_t{7}, size_t{65536}}) {
    auto a = Random(n, 1), b = Random(n, 2);
    std::vector<float> out(n);
    kernels::residual_forward(out.data(), a.data(), b.data(), static_cast<int64_t>(n));
    float* dO = Poisoned(n);
    ASSERT_TRUE(ResidualForward(dO, Upload(a), Upload(b), static_cast<int64_t>(n), nullptr).ok());
    EXPECT_LE(RelErr(Download(dO, n), out), 1e-6);
  }
}

TEST_F(CudaKernelsTest, AdamWMatchesCpuTwinOverSteps) {
  const size_t n = 100003;
  auto p = Random(n, 5, 0.02f);
  std::vector<float> m(n, 0.f), v(n, 0.f);
  float *dP = Upload(p), *dM = Upload(m), *dV = Upload(v);
  for (int step = 1; step <= 3; ++step) {
    auto g = Random(n, 100 + step, 1e-2f);
    kernels::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step};
    kernels::adamw_update(p.data(), g.data(), m.data(), v.data(), static_cast<int64_t>(n), hp);
    ASSERT_TRUE(AdamWUpdate(dP, Upload(g), dM, dV, static_cast<int64_t>(n), hp, nullptr).ok());
  }
  EXPECT_LE(RelErr(Download(dP, n), p), 1e-5);
  EXPECT_LE(RelErr(Download(dM, n), m), 1e-5);
  EXPECT_LE(RelErr(Download(dV, n), v), 1e-5);
}

TEST_F(CudaKernelsTest, ResidualBackwardAccumulatesLikeCpuTwin) {
  const size_t n = 70001;
  auto da = Random(n, 1), db = Random(n, 2), dout = Random(n, 3);
  float *dA = Upload(da), *dB = Upload(db);
  kernels::residual_backward(da.data(), db.data(), dout.data(), static_cast<int64_t>(n));
  ASSERT_TRUE(ResidualBackward(dA, dB, Upload(dout), static_cast<int64_t>(n), nullptr).ok());
  EXPECT_LE(RelErr(Download(dA, n), da), 1e-6);
  EXPECT_LE(RelErr(Download(dB, n), db), 1e-6);
}

TEST_F(CudaKernelsTest, EncoderMatchesCpuTwin) {
  for (auto [B, T, C, V] : {std::tuple{2, 5, 7, 11}, std::tuple{4, 64, 96, 50}, std::tuple{3, 33, 768, 1000}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B << " T " << T << " C " << C << " V " << V);
    const int maxT = T + 3;
    const size_t BTC = static_cast<size_t>(B) * T * C;
    auto tok = Tokens(static_cast<size_t>(B) * T, V, B + T);
    auto wte = Random(static_cast<size_t>(V) * C, 1), wpe = Random(static_cast<size_t>(maxT) * C, 2);
    auto dout = Random(BTC, 3), dwte = Random(wte.size(), 4), dwpe = Random(wpe.size(), 5);
    std::vector<float> out(BTC);
    int32_t* dTok = UploadInts(tok);
    float *dOut = Poisoned(BTC), *dDwte = Upload(dwte), *dDwpe = Upload(dwpe);
    kernels::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    kernels::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    ASSERT_TRUE(EncoderForward(*ctx_, dOut, dTok, Upload(wte), Upload(wpe), B, T, C).ok());
    ASSERT_TRUE(EncoderBackward(*ctx_, dDwte, dDwpe, Upload(dout), dTok, B, T, C).ok());
    EXPECT_LE(RelErr(Download(dOut, BTC), out), 1e-6);
    EXPECT_LE(RelErr(Download(dDwte, dwte.size()), dwte), 1e-6);
    EXPECT_LE(RelErr(Download(dDwpe, dwpe.size()), dwpe), 1e-5);
  }
}

TEST_F(CudaKernelsTest, LayerNormMatchesCpuTwin) {
  for (auto [N, C] : {std::pair{3, 7}, std::pair{64, 768}, std::pair{257, 100}, std::pair{4096, 1024}}) {
    SCOPED_TRACE(::testing::Message() << "N " << N << " C " << C);
    const size_t NC = static_cast<size_t>(N) * C;
    auto x = Random(NC, 1, 2.f), w = Random(C, 2), b = Random(C, 3), dout = Random(NC, 4);
    auto dinp = Random(NC, 5), dw = Random(C, 6), db = Random(C, 7);
    std::vector<float> out(NC), mean(N), rstd(N);
    float *dX = Upload(x), *dW = Upload(w), *dOut = Poisoned(NC), *dMean = Poisoned(N), *dRstd = Poisoned(N);
    float *dDinp = Upload(dinp), *dDw = Upload(dw), *dDb = Upload(db);
    kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    kernels::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                                rstd.data(), N, C);
    ASSERT_TRUE(LayerNormForward(*ctx_, dOut, dMean, dRstd, dX, dW, Upload(b), N, C).ok());
    ASSERT_TRUE(LayerNormBackward(*ctx_, dDinp, dDw, dDb, Upload(dout), dX, dW, dMean, dRstd, N, C).ok());
    EXPECT_LE(RelErr(Download(dOut, NC), out), 1e-5);
    EXPECT_LE(RelErr(Download(dMean, N), mean), 1e-5);
    EXPECT_LE(RelErr(Download(dRstd, N), rstd), 1e-5);
    EXPECT_LE(RelErr(Download(dDinp, NC), dinp), 1e-5);
    EXPECT_LE(RelErr(Download(dDw, C), dw), 1e-5);
    EXPECT_LE(RelErr(Download(dDb, C), db), 1e-5);
  }
}

TEST_F(CudaKernelsTest, MatmulMatchesCpuTwinInBothLayouts) {
  using kernels::WeightLayout;
  for (auto [N, C, OC] : {std::tuple{5, 7, 3}, std::tuple{64, 96, 288}, std::tuple{130, 64, 50}, std::tuple{512, 768, 3072}}) {
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "N " << N << " C " << C << " OC " << OC << " layout "
                                          << static_cast<int>(layout) << " bias " << with_bias);
        const size_t NC = static_cast<size_t>(N) * C, NO = static_cast<size_t>(N) * OC, CO = static_cast<size_t>(C) * OC;
        auto x = Random(NC, 1), w = Random(CO, 2, 0.1f), b = Random(OC, 3), dout = Random(NO, 4);
        // dweight and dbias accumulate: each side starts from the same values.
        const auto dw0 = Random(CO, 5), db0 = Random(OC, 6);
        auto dw = dw0, db = db0;
        std::vector<float> out(NO), dinp(NC);
        const float* bias = with_bias ? b.data() : nullptr;
        kernels::matmul_forward(out.data(), x.data(), w.data(), bias, N, C, OC, layout);
        kernels::matmul_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), x.data(),
                                 w.data(), N, C, OC, layout);
        float *dX = Upload(x), *dW = Upload(w), *dOut = Poisoned(NO), *dDinp = Poisoned(NC), *dDw = Upload(dw0),
              *dDb = Upload(db0);
        ASSERT_TRUE(MatmulForward(*ctx_, dOut, dX, dW, with_bias ? Upload(b) : nullptr, N, C, OC, layout).ok());
        ASSERT_TRUE(MatmulBackward(*ctx_, dDinp, dDw, with_bias ? dDb : nullptr, Upload(dout), dX, dW, N, C, OC, layout).ok());
        EXPECT_LE(RelErr(Download(dOut, NO), out), 1e-5);
        EXPECT_LE(RelErr(Download(dDinp, NC), dinp), 1e-5);
        EXPECT_LE(RelErr(Download(dDw, CO), dw), 1e-5);
        if (with_bias) {
          EXPECT_LE(RelErr(Download(dDb, OC), db), 1e-5);
        }
      }
    }
  }
}

TEST_F(CudaKernelsTest, MatmulWithGeluMatchesCpuTwin) {
  const int N = 96, C = 64, OC = 256;
  const size_t NC = static_cast<size_t>(N) * C, NO = static_cast<size_t>(N) * OC, CO = static_cast<size_t>(C) * OC;
  auto x = Random(NC, 1), w = Random(CO, 2, 0.2f), b = Random(OC, 3);
  std::vector<float> pre(NO), out(NO);
  kernels::matmul_bias_gelu_forward(pre.data(), out.data(), x.data(), w.data(), b.data(), N, C, OC);
  float *dPre = Poisoned(NO), *dOut = Poisoned(NO);
  ASSERT_TRUE(MatmulBiasGeluForward(*ctx_, dPre, dOut, Upload(x), Upload(w), Upload(b), N, C, OC).ok());
  EXPECT_LE(RelErr(Download(dPre, NO), pre), 1e-5);
  EXPECT_LE(RelErr(Download(dOut, NO), out), 1e-5);
  // The backward of a projection whose input came out of a GELU: dinp times gelu'(pre).
  const auto gpre = Random(NC, 4, 2.f), dout = Random(NO, 5), dw0 = Random(CO, 6);
  auto dw = dw0;  // accumulated into: the device's copy starts from dw0 too
  std::vector<float> dinp(NC);
  kernels::matmul_backward(dinp.data(), dw.data(), nullptr, dout.data(), x.data(), w.data(), N, C, OC,
                           kernels::WeightLayout::kInOut, gpre.data());
  float *dDinp = Poisoned(NC), *dDw = Upload(dw0);
  ASSERT_TRUE(MatmulBackward(*ctx_, dDinp, dDw, nullptr, Upload(dout), Upload(x), Upload(w), N, C, OC,
                             kernels::WeightLayout::kInOut, Upload(gpre)).ok());
  EXPECT_LE(RelErr(Download(dDinp, NC), dinp), 1e-5);
  EXPECT_LE(RelErr(Download(dDw, CO), dw), 1e-5);
}

TEST_F(CudaKernelsTest, AttentionMatchesCpuTwin) {
  for (auto [B, T, C, NH] : {std::tuple{1, 1, 4, 1}, std::tuple{2, 17, 32, 4}, std::tuple{2, 64, 64, 2},
                             std::tuple{1, 256, 768, 12}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B << " T " << T << " C " << C << " NH " << NH);
    const size_t BTC = static_cast<size_t>(B) * T * C, att_n = static_cast<size_t>(B) * NH * T * T;
    auto qkv = Random(3 * BTC, 1), dout = Random(BTC, 2);
    std::vector<float> out(BTC), att(att_n), dqkv(3 * BTC), scratch(att_n);
    kernels::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    kernels::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    float *dQkv = Upload(qkv), *dOut = Poisoned(BTC), *dAtt = Poisoned(att_n), *dDqkv = Poisoned(3 * BTC);
    float* fwd = Poisoned(AttentionForwardScratch(B, T, C, NH));
    float* bwd = Poisoned(AttentionBackwardScratch(B, T, C, NH));
    ASSERT_TRUE(AttentionForward(*ctx_, dOut, dAtt, fwd, dQkv, B, T, C, NH).ok());
    ASSERT_TRUE(AttentionBackward(*ctx_, dDqkv, bwd, Upload(dout), dQkv, dAtt, B, T, C, NH).ok());
    EXPECT_LE(RelErr(Download(dOut, BTC), out), 1e-5);
    EXPECT_LE(RelErr(Download(dAtt, att_n), att), 1e-5);
    EXPECT_LE(RelErr(Download(dDqkv, 3 * BTC), dqkv), 1e-5);
  }
}

// The fused kernel against the same CPU twin: out and dqkv; lse against
// kernels::attention_lse. Head sizes 1 to 128, uneven ones included
// (lanes that own no dimension), T not a multiple of the 32-row tiles or the 8-row blocks.
TEST_F(CudaKernelsTest, FlashAttentionMatchesCpuTwin) {
  for (auto [B, T, C, NH] : {std::tuple{1, 1, 4, 1}, std::tuple{2, 17, 32, 4}, std::tuple{2, 64, 64, 2},
                             std::tuple{1, 33, 96, 1}, std::tuple{2, 100, 256, 2}, std::tuple{1, 256, 768, 12}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B << " T " << T << " C " << C << " NH " << NH);
    const size_t BTC = static_cast<size_t>(B) * T * C, att_n = static_cast<size_t>(B) * NH * T * T;
    const size_t rows = static_cast<size_t>(B) * NH * T;
    auto qkv = Random(3 * BTC, 11), dout = Random(BTC, 12);
    std::vector<float> out(BTC), att(att_n), dqkv(3 * BTC), scratch(att_n), lse(rows);
    kernels::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    kernels::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    kernels::attention_lse(lse.data(), qkv.data(), B, T, C, NH);
    float *dQkv = Upload(qkv), *dDout = Upload(dout), *dOut = Poisoned(BTC), *dLse = Poisoned(rows);
    float *dDqkv = Poisoned(3 * BTC), *dAgain = Poisoned(3 * BTC);
    float* bwd = Poisoned(FlashAttentionBackwardScratch(B, T, C, NH));
    ASSERT_TRUE(FlashAttentionForward(*ctx_, dOut, dLse, dQkv, B, T, C, NH).ok());
    ASSERT_TRUE(FlashAttentionBackward(*ctx_, dDqkv, bwd, dDout, dQkv, dOut, dLse, B, T, C, NH).ok());
    ASSERT_TRUE(FlashAttentionBackward(*ctx_, dAgain, bwd, dDout, dQkv, dOut, dLse, B, T, C, NH).ok());
    EXPECT_LE(RelErr(Download(dOut, BTC), out), 1e-5);
    EXPECT_LE(RelErr(Download(dLse, rows), lse), 1e-5);
    const std::vector<float> got = Download(dDqkv, 3 * BTC);
    EXPECT_LE(RelErr(got, dqkv), 1e-5);
    EXPECT_EQ(Download(dAgain, 3 * BTC), got) << "deterministic: the same bits twice";
  }
  EXPECT_EQ(FlashAttentionForward(*ctx_, nullptr, nullptr, nullptr, 1, 4, 320, 2).code(),
            absl::StatusCode::kInvalidArgument)
      << "head size 160 is over the fused kernel's 128";
}

TEST_F(CudaKernelsTest, FusedClassifierMatchesCpuTwin) {
  for (auto [N, V] : {std::pair{3, 11}, std::pair{8, 50304}, std::pair{64, 1000}}) {
    SCOPED_TRACE(::testing::Message() << "N " << N << " V " << V);
    const size_t NV = static_cast<size_t>(N) * V;
    auto logits = Random(NV, 1, 3.f);
    auto targets = Tokens(static_cast<size_t>(N), V, 2);
    std::vector<float> losses(N), fused_losses(N), grads = logits;
    kernels::crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V);
    kernels::crossentropy_fused_forward_backward(fused_losses.data(), grads.data(), targets.data(), 1.f / N, N, V);
    float *dLogits = Upload(logits), *dLoss = Poisoned(N), *dFused = Poisoned(N);
    int32_t* dT = UploadInts(targets);
    ASSERT_TRUE(CrossEntropyForward(*ctx_, dLoss, dLogits, dT, N, V).ok());
    EXPECT_LE(RelErr(Download(dLogits, NV), logits), 0.0) << "the forward leaves the logits alone";
    ASSERT_TRUE(CrossEntropyFusedForwardBackward(*ctx_, dFused, dLogits, dT, 1.f / N, N, V).ok());
    EXPECT_LE(RelErr(Download(dLoss, N), losses), 1e-5);
    EXPECT_LE(RelErr(Download(dFused, N), fused_losses), 1e-5);
    EXPECT_LE(RelErr(Download(dLogits, NV), grads), 1e-5);
  }
}

TEST_F(CudaKernelsTest, GradNormMatchesCpuTwin) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{124} << 20}) {
    auto g = Random(n, n, 1e-2f);
    const double want = kernels::sum_squares(g.data(), static_cast<int64_t>(n));
    float* dG = Upload(g);
    double* dR = nullptr;
    ASSERT_EQ(cudaMalloc(&dR, sizeof(double)), cudaSuccess);
    ASSERT_TRUE(SumSquares(*ctx_, dR, dG, static_cast<int64_t>(n)).ok());
    double got = 0;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the context's stream is not the copy's
    ASSERT_EQ(cudaMemcpy(&got, dR, sizeof(double), cudaMemcpyDeviceToHost), cudaSuccess);
    cudaFree(dR);
    EXPECT_LE(std::fabs(got - want) / want, 1e-5) << n;
    kernels::scale_inplace(g.data(), static_cast<int64_t>(n), 0.25f);
    ASSERT_TRUE(ScaleInplace(*ctx_, dG, static_cast<int64_t>(n), 0.25f).ok());
    EXPECT_LE(RelErr(Download(dG, n), g), 1e-7) << n;
  }
}

TEST_F(CudaKernelsTest, LaunchersRejectBadArguments) {
  EXPECT_FALSE(GeluForward(nullptr, nullptr, -1, nullptr).ok());
  EXPECT_FALSE(AdamWUpdate(nullptr, nullptr, nullptr, nullptr, 10, {1e-3f, 0.9f, 0.95f, 1e-8f, 0.f, 0}, nullptr).ok());
  EXPECT_FALSE(MatmulForward(*ctx_, nullptr, nullptr, nullptr, nullptr, 0, 4, 4).ok());
  EXPECT_FALSE(AttentionForward(*ctx_, nullptr, nullptr, nullptr, nullptr, 1, 4, 10, 3).ok()) << "heads must divide C";
  EXPECT_FALSE(LayerNormForward(*ctx_, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, -1, 8).ok());
  EXPECT_FALSE(CrossEntropyForward(*ctx_, nullptr, nullptr, nullptr, 4, 0).ok());
}

}  // namespace
}  // namespace gantry::cuda
