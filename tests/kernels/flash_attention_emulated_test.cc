// The fused CUDA attention kernels (kernels/cuda/flash_attention.cuh), run on the CPU under
// kernels/emulated/device.h: the same device code, its tiles, barriers and warp
// shuffles, against the CPU twin (kernels::attention_forward/backward/lse, themselves
// checked against PyTorch in kernels_test). This is what CI, which has no GPU, can say of
// the kernels' logic; tests/gpu checks them on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "kernels/emulated/device.h"
// (after the emulator)
#include "kernels/cuda/flash_attention.cuh"

#include "common/rng.h"
#include "kernels/attention.h"
#include "tests/test_util.h"

namespace gantry::cuda::flash {
namespace {

std::vector<float> Random(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(r.Normal());
  return v;
}

// The launches of kernels/cuda/flash_attention.cu, on the emulator (fp32 tensors: the kernels'
// F32 instantiation; tests/kernels/backend_ops_test.cc runs the 16-bit ones through the backend).
void Forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const emu::Dim3 grid{static_cast<unsigned>((T + kBlock - 1) / kBlock), static_cast<unsigned>(B * NH), 1};
  WithHead(hs, [&](auto head) {
    constexpr int HSP = decltype(head)::value;
    emu::Launch(grid, kThreads, ForwardSharedBytes<HSP>(),
                [&] { FlashForwardKernel<F32, HSP>(out, lse, qkv, B, T, NH, hs, scale, 0); });
  });
}
void Backward(float* dqkv, float* D, const float* dout, const float* qkv, const float* out, const float* lse, int B,
              int T, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const unsigned rows = static_cast<unsigned>(B * NH * T);
  emu::Launch({(rows + kWarps - 1) / kWarps, 1, 1}, kWarps * 32, 0,
              [&] { FlashRowDotKernel<F32>(D, dout, out, B, T, NH, hs); });
  const emu::Dim3 grid{static_cast<unsigned>((T + kBlock - 1) / kBlock), static_cast<unsigned>(B * NH), 1};
  WithHead(hs, [&](auto head) {
    constexpr int HSP = decltype(head)::value;
    emu::Launch(grid, kThreads, BackwardQSharedBytes<HSP>(),
                [&] { FlashBackwardQKernel<F32, HSP>(dqkv, dout, qkv, lse, D, B, T, NH, hs, scale); });
    emu::Launch(grid, kThreads, BackwardKVSharedBytes<HSP>(),
                [&] { FlashBackwardKVKernel<F32, HSP>(dqkv, dout, qkv, lse, D, B, T, NH, hs, scale); });
  });
}

// Shapes: one token; several heads and sequences with T not a multiple of the 64-row blocks
// and tiles; each padded head size (16: head sizes 4 and 8; 32: 32; 64: 64; 128: 96, where
// some threads own no column, and 128); T over 2 and 3 blocks (the diagonal tile and the ones
// before it, queries after the block's keys).
TEST(FlashAttentionEmulatedTest, MatchesTheCpuTwin) {
  for (auto [B, T, C, NH] : {std::tuple{1, 1, 4, 1}, std::tuple{2, 17, 32, 4}, std::tuple{1, 40, 96, 1},
                             std::tuple{1, 70, 128, 1}, std::tuple{2, 130, 64, 2}, std::tuple{1, 150, 128, 2}}) {
    SCOPED_TRACE(::testing::Message() << "B " << B << " T " << T << " C " << C << " NH " << NH);
    const size_t BTC = static_cast<size_t>(B) * T * C, att_n = static_cast<size_t>(B) * NH * T * T;
    const size_t rows = static_cast<size_t>(B) * NH * T;
    const auto qkv = Random(3 * BTC, 21), dout = Random(BTC, 22);
    std::vector<float> out(BTC), att(att_n), dqkv(3 * BTC), scratch(att_n), lse(rows);
    kernels::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    kernels::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    kernels::attention_lse(lse.data(), qkv.data(), B, T, C, NH);
    // Outputs poisoned: an element no thread writes stays NaN and fails.
    std::vector<float> f_out(BTC, NAN), f_lse(rows, NAN), f_dqkv(3 * BTC, NAN), D(rows, NAN);
    Forward(f_out.data(), f_lse.data(), qkv.data(), B, T, C, NH);
    Backward(f_dqkv.data(), D.data(), dout.data(), qkv.data(), f_out.data(), f_lse.data(), B, T, C, NH);
    EXPECT_LE(testing::RelErr(f_out, out), 1e-5);
    EXPECT_LE(testing::RelErr(f_lse, lse), 1e-5);
    EXPECT_LE(testing::RelErr(f_dqkv, dqkv), 1e-5);
  }
}

}  // namespace
}  // namespace gantry::cuda::flash
