// Every CUDA op (kernels/cuda/ops.h) on the cuda-emulated backend against its CPU twin
// (kernels/*.h, itself checked against PyTorch in kernels_test), in the manner of ggml's
// test-backend-ops: the same inputs, at least five shapes an op, sizes that are multiples of
// no tile (1, 7, 33, 65, 257, ...) among them, within 1e-5 relative (fp32). The emulated
// backend is kernels/cuda's own launchers and device code, compiled for the CPU emulator with
// the same launch geometry, over the emulated runtime and cuBLAS(Lt) (kernels/emulated), so
// this is what CI can say of the CUDA path without a GPU. Inputs live in emulated device
// memory; outputs start as NaN so that an element no thread writes fails.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
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
#include "tests/test_util.h"

namespace gantry::cuda_emulated {
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

// A device buffer holding a copy of host values (or NaN), read back with Host().
template <typename T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(&p_, std::max<size_t>(n_, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit Dev(size_t n) : Dev(std::vector<T>(n, static_cast<T>(NAN))) {}
  ~Dev() { cudaFree(p_); }
  Dev(const Dev&) = delete;
  T* get() const { return p_; }
  std::vector<T> Host() const {
    std::vector<T> h(n_);
    EXPECT_EQ(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  size_t n_;
  T* p_ = nullptr;
};

class BackendOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = Context::Create(0);
    ASSERT_TRUE(c.ok()) << c.status();
    ctx_ = std::move(*c);
  }
  std::unique_ptr<Context> ctx_;
};

TEST_F(BackendOpsTest, ElementwiseOpsMatchTheCpuBackend) {
  for (int64_t n : {1, 7, 255, 257, 1000, 4099}) {
    SCOPED_TRACE(n);
    const auto x = Random(n, 1, 3.f), a = Random(n, 2), b = Random(n, 3), dout = Random(n, 4), acc1 = Random(n, 5),
               acc2 = Random(n, 6), g = Random(n, 7);
    std::vector<float> out(n), dx(n), res(n), da = acc1, db = acc2, gs = g;
    kernels::gelu_forward(out.data(), x.data(), n);
    kernels::gelu_backward(dx.data(), x.data(), dout.data(), n);
    kernels::residual_forward(res.data(), a.data(), b.data(), n);
    kernels::residual_backward(da.data(), db.data(), dout.data(), n);
    kernels::scale_inplace(gs.data(), n, 0.25f);
    Dev<float> dX(x), dA(a), dB(b), dD(dout), eOut(n), eDx(n), eRes(n), eDa(acc1), eDb(acc2), eG(g);
    ASSERT_TRUE(GeluForward(eOut.get(), dX.get(), n, ctx_->stream()).ok());
    ASSERT_TRUE(GeluBackward(eDx.get(), dX.get(), dD.get(), n, ctx_->stream()).ok());
    ASSERT_TRUE(ResidualForward(eRes.get(), dA.get(), dB.get(), n, ctx_->stream()).ok());
    ASSERT_TRUE(ResidualBackward(eDa.get(), eDb.get(), dD.get(), n, ctx_->stream()).ok());
    ASSERT_TRUE(ScaleInplace(*ctx_, eG.get(), n, 0.25f).ok());
    EXPECT_LE(RelErr(eOut.Host(), out), kTol);
    EXPECT_LE(RelErr(eDx.Host(), dx), kTol);
    EXPECT_LE(RelErr(eRes.Host(), res), kTol);
    EXPECT_LE(RelErr(eDa.Host(), da), kTol);
    EXPECT_LE(RelErr(eDb.Host(), db), kTol);
    EXPECT_LE(RelErr(eG.Host(), gs), kTol);
  }
}

TEST_F(BackendOpsTest, AdamWAndSumOfSquaresMatchTheCpuBackend) {
  const kernels::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
  for (int64_t n : {1, 33, 1000, 4097, 70001}) {
    SCOPED_TRACE(n);
    const auto p = Random(n, 1), g = Random(n, 2), m = Random(n, 3, 0.1f);
    auto v = Random(n, 4, 0.1f);
    for (auto& x : v) x = x * x;
    std::vector<float> cp = p, cm = m, cv = v;
    kernels::adamw_update(cp.data(), g.data(), cm.data(), cv.data(), n, hp);
    Dev<float> eP(p), eG(g), eM(m), eV(v);
    ASSERT_TRUE(AdamWUpdate(eP.get(), eG.get(), eM.get(), eV.get(), n, hp, ctx_->stream()).ok());
    EXPECT_LE(RelErr(eP.Host(), cp), kTol);
    EXPECT_LE(RelErr(eM.Host(), cm), kTol);
    EXPECT_LE(RelErr(eV.Host(), cv), kTol);
    Dev<double> sum(std::vector<double>{NAN});
    ASSERT_TRUE(SumSquares(*ctx_, sum.get(), eG.get(), n).ok());
    const double want = kernels::sum_squares(g.data(), n);
    EXPECT_LE(std::fabs(sum.Host()[0] - want), kTol * want);
  }
}

TEST_F(BackendOpsTest, EncoderAndLayerNormMatchTheCpuBackend) {
  // (B, T, C, V)
  for (auto [B, T, C, V] : {std::tuple{1, 1, 1, 3}, std::tuple{2, 7, 33, 50}, std::tuple{3, 5, 64, 17},
                            std::tuple{1, 16, 100, 257}, std::tuple{2, 9, 257, 31}}) {
    SCOPED_TRACE(::testing::Message() << B << "x" << T << "x" << C << " V " << V);
    const int N = B * T;
    const auto tok = Tokens(N, V, 1);
    const auto wte = Random(static_cast<size_t>(V) * C, 2), wpe = Random(static_cast<size_t>(T) * C, 3),
               dout = Random(static_cast<size_t>(N) * C, 4), dwte0 = Random(static_cast<size_t>(V) * C, 5),
               dwpe0 = Random(static_cast<size_t>(T) * C, 6);
    std::vector<float> enc(static_cast<size_t>(N) * C), dwte = dwte0, dwpe = dwpe0;
    kernels::encoder_forward(enc.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    kernels::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    Dev<int32_t> eTok(tok);
    Dev<float> eWte(wte), eWpe(wpe), eDout(dout), eEnc(enc.size()), eDwte(dwte0), eDwpe(dwpe0);
    ASSERT_TRUE(EncoderForward(*ctx_, eEnc.get(), eTok.get(), eWte.get(), eWpe.get(), B, T, C).ok());
    ASSERT_TRUE(EncoderBackward(*ctx_, eDwte.get(), eDwpe.get(), eDout.get(), eTok.get(), B, T, C).ok());
    EXPECT_LE(RelErr(eEnc.Host(), enc), kTol);
    EXPECT_LE(RelErr(eDwte.Host(), dwte), kTol);
    EXPECT_LE(RelErr(eDwpe.Host(), dwpe), kTol);

    const auto x = Random(static_cast<size_t>(N) * C, 7, 2.f), w = Random(C, 8), bias = Random(C, 9),
               dinp0 = Random(static_cast<size_t>(N) * C, 10), dw0 = Random(C, 11), db0 = Random(C, 12);
    std::vector<float> out(x.size()), mean(N), rstd(N), dinp = dinp0, dw = dw0, db = db0;
    kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), bias.data(), N, C);
    kernels::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                                rstd.data(), N, C);
    Dev<float> eX(x), eW(w), eB(bias), eOut(x.size()), eMean(N), eRstd(N), eDinp(dinp0), eDw(dw0), eDb(db0);
    ASSERT_TRUE(LayerNormForward(*ctx_, eOut.get(), eMean.get(), eRstd.get(), eX.get(), eW.get(), eB.get(), N, C).ok());
    ASSERT_TRUE(LayerNormBackward(*ctx_, eDinp.get(), eDw.get(), eDb.get(), eDout.get(), eX.get(), eW.get(),
                                  eMean.get(), eRstd.get(), N, C)
                    .ok());
    EXPECT_LE(RelErr(eOut.Host(), out), kTol);
    EXPECT_LE(RelErr(eMean.Host(), mean), kTol);
    EXPECT_LE(RelErr(eRstd.Host(), rstd), kTol);
    EXPECT_LE(RelErr(eDinp.Host(), dinp), kTol);
    EXPECT_LE(RelErr(eDw.Host(), dw), kTol);
    EXPECT_LE(RelErr(eDb.Host(), db), kTol);
  }
}

TEST_F(BackendOpsTest, MatmulsInBothLayoutsMatchTheCpuBackend) {
  using kernels::WeightLayout;
  // (N, C, OC)
  for (auto [N, C, OC] : {std::tuple{1, 1, 1}, std::tuple{7, 33, 65}, std::tuple{64, 64, 64}, std::tuple{37, 100, 13},
                          std::tuple{130, 17, 257}}) {
    for (WeightLayout layout : {WeightLayout::kInOut, WeightLayout::kOutIn}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << N << "x" << C << "x" << OC << (layout == WeightLayout::kOutIn ? " OutIn" : " InOut")
                                          << (with_bias ? " bias" : ""));
        const auto x = Random(static_cast<size_t>(N) * C, 1), w = Random(static_cast<size_t>(C) * OC, 2),
                   b = Random(OC, 3), dout = Random(static_cast<size_t>(N) * OC, 4),
                   dw0 = Random(w.size(), 5), db0 = Random(OC, 6);
        std::vector<float> out(static_cast<size_t>(N) * OC), dinp(x.size()), dw = dw0, db = db0;
        kernels::matmul_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC, layout);
        kernels::matmul_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), x.data(),
                                 w.data(), N, C, OC, layout);
        Dev<float> eX(x), eW(w), eB(b), eDout(dout), eOut(out.size()), eDinp(x.size()), eDw(dw0), eDb(db0);
        ASSERT_TRUE(MatmulForward(*ctx_, eOut.get(), eX.get(), eW.get(), with_bias ? eB.get() : nullptr, N, C, OC,
                                  layout)
                        .ok());
        ASSERT_TRUE(MatmulBackward(*ctx_, eDinp.get(), eDw.get(), with_bias ? eDb.get() : nullptr, eDout.get(),
                                   eX.get(), eW.get(), N, C, OC, layout)
                        .ok());
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
    kernels::matmul_bias_gelu_forward(pre.data(), out.data(), x.data(), w.data(), b.data(), N, C, OC);
    Dev<float> eX(x), eW(w), eB(b), ePre(pre.size()), eOut(out.size());
    ASSERT_TRUE(MatmulBiasGeluForward(*ctx_, ePre.get(), eOut.get(), eX.get(), eW.get(), eB.get(), N, C, OC).ok());
    EXPECT_LE(RelErr(ePre.Host(), pre), kTol);
    EXPECT_LE(RelErr(eOut.Host(), out), kTol);
    // The backward of the next matmul through the GELU: dinp times gelu'(gelu_pre). Here the
    // matmul is (N, OC) → (N, C) with weight (OC, C), and gelu_pre is (N, OC).
    const auto gpre = Random(static_cast<size_t>(N) * OC, 6), w2 = Random(static_cast<size_t>(OC) * C, 7);
    std::vector<float> dinp(static_cast<size_t>(N) * OC), dw = dw0;
    kernels::matmul_backward(dinp.data(), dw.data(), nullptr, dout.data(), out.data(), w2.data(), N, OC, C,
                             kernels::WeightLayout::kInOut, gpre.data());
    Dev<float> eGpre(gpre), eW2(w2), eDout(dout), eDinp(dinp.size()), eDw(dw0);
    ASSERT_TRUE(MatmulBackward(*ctx_, eDinp.get(), eDw.get(), nullptr, eDout.get(), eOut.get(), eW2.get(), N, OC, C,
                               kernels::WeightLayout::kInOut, eGpre.get())
                    .ok());
    EXPECT_LE(RelErr(eDinp.Host(), dinp), kTol);
    EXPECT_LE(RelErr(eDw.Host(), dw), kTol);
  }
}

TEST_F(BackendOpsTest, AttentionBothWaysMatchesTheCpuBackend) {
  // (B, T, C, NH): head sizes 1, 8, 11, 16, 32 and lengths that fill no tile.
  for (auto [B, T, C, NH] : {std::tuple{1, 1, 1, 1}, std::tuple{2, 7, 16, 2}, std::tuple{1, 33, 33, 3},
                             std::tuple{2, 17, 64, 4}, std::tuple{1, 65, 32, 1}}) {
    SCOPED_TRACE(::testing::Message() << B << "x" << T << "x" << C << " NH " << NH);
    const size_t n_qkv = static_cast<size_t>(B) * T * 3 * C, n_out = static_cast<size_t>(B) * T * C,
                 n_att = static_cast<size_t>(B) * NH * T * T;
    const auto qkv = Random(n_qkv, 1), dout = Random(n_out, 2);
    std::vector<float> out(n_out), att(n_att), dqkv(n_qkv), scratch(n_att), lse(static_cast<size_t>(B) * NH * T);
    kernels::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    kernels::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    kernels::attention_lse(lse.data(), qkv.data(), B, T, C, NH);
    Dev<float> eQkv(qkv), eDout(dout);
    {  // cuBLAS batched GEMMs over the (T, T) probabilities
      Dev<float> eOut(n_out), eAtt(n_att), eDqkv(n_qkv), fs(AttentionForwardScratch(B, T, C, NH)),
          bs(AttentionBackwardScratch(B, T, C, NH));
      ASSERT_TRUE(AttentionForward(*ctx_, eOut.get(), eAtt.get(), fs.get(), eQkv.get(), B, T, C, NH).ok());
      ASSERT_TRUE(
          AttentionBackward(*ctx_, eDqkv.get(), bs.get(), eDout.get(), eQkv.get(), eAtt.get(), B, T, C, NH).ok());
      EXPECT_LE(RelErr(eOut.Host(), out), kTol);
      EXPECT_LE(RelErr(eAtt.Host(), att), kTol);
      EXPECT_LE(RelErr(eDqkv.Host(), dqkv), kTol);
    }
    {  // fused (flash-style): the log-sum-exp in place of the probabilities
      Dev<float> eOut(n_out), eLse(lse.size()), eDqkv(n_qkv), bs(FlashAttentionBackwardScratch(B, T, C, NH));
      ASSERT_TRUE(FlashAttentionForward(*ctx_, eOut.get(), eLse.get(), eQkv.get(), B, T, C, NH).ok());
      ASSERT_TRUE(FlashAttentionBackward(*ctx_, eDqkv.get(), bs.get(), eDout.get(), eQkv.get(), eOut.get(),
                                         eLse.get(), B, T, C, NH)
                      .ok());
      EXPECT_LE(RelErr(eOut.Host(), out), kTol);
      EXPECT_LE(RelErr(eLse.Host(), lse), kTol);
      EXPECT_LE(RelErr(eDqkv.Host(), dqkv), kTol);
    }
  }
}

TEST_F(BackendOpsTest, TheClassifierMatchesTheCpuBackend) {
  for (auto [N, V] : {std::tuple{1, 1}, std::tuple{7, 33}, std::tuple{16, 257}, std::tuple{3, 1000},
                      std::tuple{33, 50257 / 40}}) {
    SCOPED_TRACE(::testing::Message() << N << " rows, V " << V);
    const auto logits = Random(static_cast<size_t>(N) * V, 1, 3.f);
    const auto tgt = Tokens(N, V, 2);
    std::vector<float> losses(N), fused_losses(N), grad = logits;
    kernels::crossentropy_forward(losses.data(), logits.data(), tgt.data(), N, V);
    kernels::crossentropy_fused_forward_backward(fused_losses.data(), grad.data(), tgt.data(), 0.5f / N, N, V);
    Dev<int32_t> eT(tgt);
    Dev<float> eL(logits), eLoss(N), eGrad(logits), eFused(N);
    ASSERT_TRUE(CrossEntropyForward(*ctx_, eLoss.get(), eL.get(), eT.get(), N, V).ok());
    ASSERT_TRUE(CrossEntropyFusedForwardBackward(*ctx_, eFused.get(), eGrad.get(), eT.get(), 0.5f / N, N, V).ok());
    EXPECT_LE(RelErr(eLoss.Host(), losses), kTol);
    EXPECT_LE(RelErr(eFused.Host(), fused_losses), kTol);
    EXPECT_LE(RelErr(eGrad.Host(), grad), kTol);
  }
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

}  // namespace
}  // namespace gantry::cuda_emulated
