// The hand-written CUDA kernels (kernels/cuda/*.cuh: elementwise, AdamW, encoder, LayerNorm
// with its column sums, the fused classifier, the sum of squares) run on the CPU under
// kernels/emulated/device.h, with the launch geometry of their .cu launchers, against
// their CPU twins (themselves checked against PyTorch in kernels_test). Outputs start as NaN
// so that an element no thread writes fails. This is what CI, which has no GPU, can say of
// the kernels' indexing, reductions and barriers; tests/gpu checks them on a GPU (cuBLAS's
// matmuls and the batched attention only there). The fused attention has its own
// emulated test.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "kernels/emulated/device.h"
// (after the emulator)
#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/column_sums_kernels.cuh"
#include "kernels/cuda/crossentropy_norm.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/encoder_layernorm.cuh"

#include "common/rng.h"
#include "kernels/adamw.h"
#include "kernels/crossentropy.h"
#include "kernels/encoder.h"
#include "kernels/gelu.h"
#include "kernels/grad_norm.h"
#include "kernels/layernorm.h"
#include "kernels/residual.h"
#include "tests/test_util.h"

namespace gantry::cuda {
namespace {

using testing::RelErr;

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
std::vector<float> Poison(size_t n) { return std::vector<float>(n, NAN); }
emu::Dim3 Grid(int64_t blocks, unsigned y = 1) { return {static_cast<unsigned>(blocks), y, 1}; }

TEST(CudaEmulatedTest, ElementwiseKernelsMatchTheirCpuTwins) {
  for (int64_t n : {int64_t{1}, int64_t{300}, int64_t{1000}}) {
    SCOPED_TRACE(n);
    const auto x = Random(n, 1, 3.f), a = Random(n, 2), b = Random(n, 3), dout = Random(n, 4);
    std::vector<float> out(n), dx(n), res(n), da = Random(n, 5), db = Random(n, 6), g = Random(n, 7);
    kernels::gelu_forward(out.data(), x.data(), n);
    kernels::gelu_backward(dx.data(), x.data(), dout.data(), n);
    kernels::residual_forward(res.data(), a.data(), b.data(), n);
    auto e_out = Poison(n), e_dx = Poison(n), e_res = Poison(n), e_da = da, e_db = db, e_g = g;
    kernels::residual_backward(da.data(), db.data(), dout.data(), n);
    kernels::scale_inplace(g.data(), n, 0.25f);
    const emu::Dim3 grid = Grid(CeilDiv(n, kBlock));
    emu::Launch(grid, kBlock, 0, [&] { GeluForwardKernel(e_out.data(), x.data(), n); });
    emu::Launch(grid, kBlock, 0, [&] { GeluBackwardKernel(e_dx.data(), x.data(), dout.data(), n); });
    emu::Launch(grid, kBlock, 0, [&] { ResidualForwardKernel(e_res.data(), a.data(), b.data(), n); });
    emu::Launch(grid, kBlock, 0, [&] { ResidualBackwardKernel(e_da.data(), e_db.data(), dout.data(), n); });
    emu::Launch(grid, kBlock, 0, [&] { ScaleKernel(e_g.data(), n, 0.25f); });
    // The fp32 bound, as tests/gpu: the CPU twin's tanh is its own vectorised
    // polynomial (kernels/cpu/vec_math.h), the kernel's is tanhf; they differ by ~5e-6.
    EXPECT_LE(RelErr(e_out, out), 1e-5);
    EXPECT_LE(RelErr(e_dx, dx), 1e-5);
    EXPECT_LE(RelErr(e_res, res), 0.0);
    EXPECT_LE(RelErr(e_da, da), 0.0);
    EXPECT_LE(RelErr(e_db, db), 0.0);
    EXPECT_LE(RelErr(e_g, g), 0.0);
  }
}

TEST(CudaEmulatedTest, AdamWMatchesItsCpuTwinOverSteps) {
  const int64_t n = 1001;
  auto p = Random(n, 5, 0.02f), e_p = p;
  std::vector<float> m(n, 0.f), v(n, 0.f), e_m = m, e_v = v;
  for (int step = 1; step <= 3; ++step) {
    const auto g = Random(n, 100 + step, 1e-2f);
    const kernels::AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step};
    kernels::adamw_update(p.data(), g.data(), m.data(), v.data(), n, hp);
    const AdamWScalars k = AdamWScalarsOf(hp);
    emu::Launch(Grid(CeilDiv(n, 256)), 256, 0, [&] {
      AdamWKernel(e_p.data(), g.data(), e_m.data(), e_v.data(), n, hp.beta1, hp.beta2, hp.eps, k.step_size,
                  k.bc2_sqrt, k.decay);
    });
  }
  EXPECT_LE(RelErr(e_p, p), 1e-6);
  EXPECT_LE(RelErr(e_m, m), 1e-6);
  EXPECT_LE(RelErr(e_v, v), 1e-6);
}

TEST(CudaEmulatedTest, EncoderMatchesItsCpuTwin) {
  for (auto [B, T, C, V] : {std::tuple{2, 5, 7, 11}, std::tuple{3, 9, 40, 50}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B << " T " << T << " C " << C << " V " << V);
    const int maxT = T + 3;
    const size_t BTC = static_cast<size_t>(B) * T * C;
    const auto tok = Tokens(static_cast<size_t>(B) * T, V, B + T);
    const auto wte = Random(static_cast<size_t>(V) * C, 1), wpe = Random(static_cast<size_t>(maxT) * C, 2);
    const auto dout = Random(BTC, 3);
    auto dwte = Random(wte.size(), 4), dwpe = Random(wpe.size(), 5), e_dwte = dwte, e_dwpe = dwpe;
    std::vector<float> out(BTC);
    auto e_out = Poison(BTC);
    kernels::encoder_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
    kernels::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
    emu::Launch(Grid(CeilDiv(BTC, 256)), 256, 0,
                [&] { EncoderForwardKernel(e_out.data(), tok.data(), wte.data(), wpe.data(), B * T, T, C); });
    emu::Launch(Grid(CeilDiv(C, 128)), 128, 0,
                [&] { EncoderBackwardWteKernel(e_dwte.data(), dout.data(), tok.data(), B * T, C); });
    emu::Launch(Grid(CeilDiv(int64_t{T} * C, 256)), 256, 0,
                [&] { EncoderBackwardWpeKernel(e_dwpe.data(), dout.data(), B, T, C); });
    EXPECT_LE(RelErr(e_out, out), 0.0);
    EXPECT_LE(RelErr(e_dwte, dwte), 1e-6);
    EXPECT_LE(RelErr(e_dwpe, dwpe), 1e-6);
  }
}

// Forward, the input gradient, and dweight/dbias through the two column-sum kernels; 600
// rows make chunks of 10, so that all 8 thread rows of a partial block hold rows.
TEST(CudaEmulatedTest, LayerNormMatchesItsCpuTwin) {
  for (auto [N, C] : {std::pair{3, 7}, std::pair{37, 100}, std::pair{600, 40}}) {
    SCOPED_TRACE(::testing::Message() << "N " << N << " C " << C);
    const size_t NC = static_cast<size_t>(N) * C;
    const auto x = Random(NC, 1, 2.f), w = Random(C, 2), b = Random(C, 3), dout = Random(NC, 4);
    auto dinp = Random(NC, 5), dw = Random(C, 6), db = Random(C, 7), e_dinp = dinp, e_dw = dw, e_db = db;
    std::vector<float> out(NC), mean(N), rstd(N);
    auto e_out = Poison(NC), e_mean = Poison(N), e_rstd = Poison(N);
    kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    kernels::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                                rstd.data(), N, C);
    emu::Launch(Grid(CeilDiv(N, 8)), 256, 0, [&] {
      LayerNormForwardKernel(e_out.data(), e_mean.data(), e_rstd.data(), x.data(), w.data(), b.data(), N, C);
    });
    emu::Launch(Grid(CeilDiv(N, 8)), 256, 0, [&] {
      LayerNormBackwardInputKernel(e_dinp.data(), dout.data(), x.data(), w.data(), e_mean.data(), e_rstd.data(), N,
                                   C);
    });
    // ColumnSums (column_sums.cuh) on a scratch of 4M floats, as the Context's.
    const ColumnGrid g = ColumnGridOf(N, C, int64_t{4} << 20);
    ASSERT_GT(g.used, 0);
    std::vector<float2> partial(static_cast<size_t>(g.used) * C, float2{NAN, NAN});
    const LayerNormParamGrads f{dout.data(), x.data(), e_mean.data(), e_rstd.data(), C};
    emu::Launch(Grid(CeilDiv(C, 32), static_cast<unsigned>(g.used)), emu::Dim3{32, 8, 1}, 0,
                [&] { ColumnPartialsKernel(partial.data(), f, N, C, g.rows_per_chunk); });
    emu::Launch(Grid(CeilDiv(C, 256)), 256, 0,
                [&] { ColumnFinishKernel(e_dw.data(), e_db.data(), partial.data(), g.used, C); });
    EXPECT_LE(RelErr(e_out, out), 1e-5);
    EXPECT_LE(RelErr(e_mean, mean), 1e-6);
    EXPECT_LE(RelErr(e_rstd, rstd), 1e-5);
    EXPECT_LE(RelErr(e_dinp, dinp), 1e-5);
    EXPECT_LE(RelErr(e_dw, dw), 1e-5);
    EXPECT_LE(RelErr(e_db, db), 1e-5);
  }
}

TEST(CudaEmulatedTest, FusedClassifierMatchesItsCpuTwin) {
  for (auto [N, V] : {std::pair{3, 11}, std::pair{4, 3000}}) {
    SCOPED_TRACE(::testing::Message() << "N " << N << " V " << V);
    const size_t NV = static_cast<size_t>(N) * V;
    const auto logits = Random(NV, 1, 3.f);
    const auto targets = Tokens(static_cast<size_t>(N), V, 2);
    std::vector<float> losses(N), fused_losses(N), grads = logits;
    kernels::crossentropy_forward(losses.data(), logits.data(), targets.data(), N, V);
    kernels::crossentropy_fused_forward_backward(fused_losses.data(), grads.data(), targets.data(), 1.f / N, N, V);
    auto e_losses = Poison(N), e_fused = Poison(N), e_logits = logits;
    emu::Launch(Grid(N), kRowThreads, 0,
                [&] { CrossEntropyKernel<false>(e_losses.data(), e_logits.data(), targets.data(), 0.f, V); });
    EXPECT_LE(RelErr(e_logits, logits), 0.0) << "the forward leaves the logits alone";
    emu::Launch(Grid(N), kRowThreads, 0,
                [&] { CrossEntropyKernel<true>(e_fused.data(), e_logits.data(), targets.data(), 1.f / N, V); });
    EXPECT_LE(RelErr(e_losses, losses), 1e-6);
    EXPECT_LE(RelErr(e_fused, fused_losses), 1e-6);
    EXPECT_LE(RelErr(e_logits, grads), 1e-6);
  }
}

TEST(CudaEmulatedTest, SumOfSquaresMatchesItsCpuTwin) {
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{5000}}) {
    SCOPED_TRACE(n);
    const auto g = Random(n, n, 1e-2f);
    const double want = kernels::sum_squares(g.data(), n);
    const int blocks = SumSquaresBlocks(n);
    auto partial = Poison(blocks);
    double got = NAN;
    emu::Launch(Grid(blocks), 1024, 0, [&] { SumSquaresPartialKernel(partial.data(), g.data(), n); });
    emu::Launch(Grid(1), 32, 0, [&] { SumSquaresFinishKernel(&got, partial.data(), blocks); });
    EXPECT_LE(std::fabs(got - want) / want, 1e-6);
  }
}

}  // namespace
}  // namespace gantry::cuda
