// The emulated cudnn-frontend (kernels/emulated/cudnn_frontend.h) refuses the graphs cuDNN
// refuses for grouped-query attention, at validate, with cuDNN's words: K and V with a head
// count that is not a factor of Q's. It takes K and V with fewer heads than Q (a factor of
// them), and refuses what it does not compute (K and V of different head counts), and
// gradients whose shape is not their tensor's. The arithmetic is backend_ops_test's
// (CudnnGroupedAttentionIsWithinItsBoundAndRepeatsItsBits).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>
#include <memory>
#include <string>

#include "kernels/attention.h"
#include "kernels/cast.h"
#include "kernels/emulated/cudnn_frontend.h"

namespace gantry::emucudnn::cudnn_frontend {
namespace {

using graph::Graph;
using graph::Tensor_attributes;
using TensorPtr = std::shared_ptr<Tensor_attributes>;

// A (B, H, S, D) view of rows `row` elements wide, as the wrapper lays them out.
Tensor_attributes View(const char* name, int64_t uid, int64_t B, int64_t H, int64_t S, int64_t D, int64_t row) {
  return Tensor_attributes().set_name(name).set_uid(uid).set_dim({B, H, S, D}).set_stride({S * row, D, row, 1});
}

Graph Typed() {
  Graph g;
  g.set_io_data_type(DataType_t::BFLOAT16)
      .set_intermediate_data_type(DataType_t::FLOAT)
      .set_compute_data_type(DataType_t::FLOAT);
  return g;
}

// The forward graph of h_q query heads over h_k key and h_v value heads (B 2, S 9, D 16).
error_t Forward(int64_t hq, int64_t hk, int64_t hv) {
  const int64_t B = 2, S = 9, D = 16, W = (hq + hk + hv) * D;
  Graph g = Typed();
  TensorPtr q = g.tensor(View("q", 1, B, hq, S, D, W)), k = g.tensor(View("k", 2, B, hk, S, D, W)),
            v = g.tensor(View("v", 3, B, hv, S, D, W));
  auto [o, stats] =
      g.sdpa(q, k, v, graph::SDPA_attributes().set_generate_stats(true).set_causal_mask(true).set_attn_scale(0.25f));
  o->set_output(true).set_uid(4).set_dim({B, hq, S, D}).set_stride({S * hq * D, D, hq * D, 1});
  stats->set_output(true).set_uid(5).set_data_type(DataType_t::FLOAT);
  return g.validate();
}

// The backward graph of h_q query heads over h_k key/value heads, dK and dV of dk_heads heads.
error_t Backward(int64_t hq, int64_t hk, int64_t dk_heads) {
  const int64_t B = 1, S = 5, D = 8, W = (hq + 2 * hk) * D, C = hq * D;
  Graph g = Typed();
  TensorPtr q = g.tensor(View("q", 1, B, hq, S, D, W)), k = g.tensor(View("k", 2, B, hk, S, D, W)),
            v = g.tensor(View("v", 3, B, hk, S, D, W)), o = g.tensor(View("o", 4, B, hq, S, D, C)),
            d_o = g.tensor(View("dO", 6, B, hq, S, D, C));
  TensorPtr stats = g.tensor(Tensor_attributes()
                                 .set_name("stats")
                                 .set_uid(5)
                                 .set_dim({B, hq, S, 1})
                                 .set_stride({hq * S, S, 1, 1})
                                 .set_data_type(DataType_t::FLOAT));
  auto [dq, dk, dv] = g.sdpa_backward(
      q, k, v, o, d_o, stats,
      graph::SDPA_backward_attributes().set_causal_mask(true).set_attn_scale(0.25f).set_deterministic_algorithm(true));
  dq->set_output(true).set_uid(7).set_dim({B, hq, S, D}).set_stride({S * W, D, W, 1});
  dk->set_output(true).set_uid(8).set_dim({B, dk_heads, S, D}).set_stride({S * W, D, W, 1});
  dv->set_output(true).set_uid(9).set_dim({B, hk, S, D}).set_stride({S * W, D, W, 1});
  return g.validate();
}

TEST(CudnnStandInTest, TakesKeyValueHeadsThatDivideTheQueryHeads) {
  for (auto [hq, hk] : {std::pair{12, 4}, std::pair{4, 1}, std::pair{6, 6}, std::pair{1, 1}}) {
    const error_t fwd = Forward(hq, hk, hk), bwd = Backward(hq, hk, hk);
    EXPECT_TRUE(fwd.is_good()) << hq << " over " << hk << ": " << fwd.get_message();
    EXPECT_TRUE(bwd.is_good()) << hq << " over " << hk << ": " << bwd.get_message();
  }
}

TEST(CudnnStandInTest, RefusesKeyValueHeadsThatDoNotDivideTheQueryHeads) {
  for (auto [hq, hk] : {std::pair{6, 4}, std::pair{4, 8}, std::pair{3, 2}}) {
    for (const error_t& e : {Forward(hq, hk, hk), Backward(hq, hk, hk)}) {
      EXPECT_EQ(e.get_code(), error_code_t::GRAPH_NOT_SUPPORTED) << hq << " over " << hk << ": " << e.get_message();
      EXPECT_NE(e.get_message().find("must be a factor of number of heads for query (h_q " + std::to_string(hq) +
                                     ", h_k " + std::to_string(hk) + ")"),
                std::string::npos)
          << e.get_message();
    }
  }
}

TEST(CudnnStandInTest, RefusesWhatItDoesNotComputeAndGradientsOfAnotherShape) {
  // K and V with different head counts (cuDNN takes both factors; the stand-in computes one).
  const error_t kv = Forward(12, 4, 2);
  EXPECT_EQ(kv.get_code(), error_code_t::INVALID_VALUE) << kv.get_message();
  EXPECT_NE(kv.get_message().find("the node's other key/value tensors"), std::string::npos) << kv.get_message();
  // dK with the query heads' count rather than K's.
  const error_t dk = Backward(4, 2, 4);
  EXPECT_EQ(dk.get_code(), error_code_t::INVALID_VALUE) << dk.get_message();
  EXPECT_NE(dk.get_message().find("dK"), std::string::npos) << dk.get_message();
}

// The forward graph of B 1, H 2, S 5, D 8 on packed q|k|v rows, scaled by `scale`, executed on
// emulated device memory: its output (bf16 bits), or the execution's error. With
// `workspace` false the call passes none.
struct Executed {
  error_t error;
  std::vector<uint16_t> out;
  int64_t workspace_bytes = 0;
};
Executed ExecuteForward(float scale, const std::vector<uint16_t>& qkv, bool workspace) {
  const int64_t B = 1, H = 2, S = 5, D = 8, C = H * D, W = 3 * C;
  Graph g = Typed();
  TensorPtr q = g.tensor(View("q", 1, B, H, S, D, W)), k = g.tensor(View("k", 2, B, H, S, D, W)),
            v = g.tensor(View("v", 3, B, H, S, D, W));
  auto [o, stats] =
      g.sdpa(q, k, v, graph::SDPA_attributes().set_generate_stats(true).set_causal_mask(true).set_attn_scale(scale));
  o->set_output(true).set_uid(4).set_dim({B, H, S, D}).set_stride({S * C, D, C, 1});
  stats->set_output(true).set_uid(5).set_data_type(DataType_t::FLOAT);
  Executed r;
  cudnnHandle_t handle = nullptr;
  EXPECT_EQ(detail::create_handle(&handle), CUDNN_STATUS_SUCCESS);
  for (error_t e : {g.validate(), g.build_operation_graph(handle), g.create_execution_plans({HeurMode_t::A}),
                    g.check_support(), g.build_plans(), g.get_workspace_size(r.workspace_bytes)}) {
    if (e.is_bad()) {
      r.error = e;
      detail::destroy_handle(handle);
      return r;
    }
  }
  void *dqkv = nullptr, *dout = nullptr, *dstats = nullptr, *ws = nullptr;
  EXPECT_EQ(emucuda::cudaMalloc(&dqkv, qkv.size() * 2), emucuda::cudaSuccess);
  EXPECT_EQ(emucuda::cudaMalloc(&dout, static_cast<size_t>(B * S * C) * 2), emucuda::cudaSuccess);
  EXPECT_EQ(emucuda::cudaMalloc(&dstats, static_cast<size_t>(B * H * S) * 4), emucuda::cudaSuccess);
  if (workspace) EXPECT_EQ(emucuda::cudaMalloc(&ws, static_cast<size_t>(r.workspace_bytes)), emucuda::cudaSuccess);
  std::memcpy(dqkv, qkv.data(), qkv.size() * 2);
  char* base = static_cast<char*>(dqkv);
  std::unordered_map<int64_t, void*> pack = {{1, base}, {2, base + C * 2}, {3, base + 2 * C * 2}, {4, dout}, {5, dstats}};
  r.error = g.execute(handle, pack, ws);
  r.out.resize(static_cast<size_t>(B * S * C));
  std::memcpy(r.out.data(), dout, r.out.size() * 2);
  for (void* p : {dqkv, dout, dstats, ws}) {
    if (p != nullptr) emucuda::cudaFree(p);
  }
  detail::destroy_handle(handle);
  return r;
}

std::vector<uint16_t> RandomBf16(size_t n) {
  std::vector<uint16_t> h(n);
  uint64_t x = 88172645463325252ull;
  for (auto& v : h) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = kernels::Bf16Of(static_cast<float>(static_cast<int64_t>(x % 2001) - 1000) / 500.f);
  }
  return h;
}

// The stand-in scores with the graph's attn_scale, whatever it is: the cpu twin's bits at that
// scale, and not those at 1/sqrt(D). Fails if it scales by 1/sqrt(D) regardless.
TEST(CudnnStandInTest, HonoursTheAttentionScale) {
  const int B = 1, T = 5, C = 16, NH = 2;  // ExecuteForward's shapes
  const std::vector<uint16_t> qkv = RandomBf16(static_cast<size_t>(B * T * 3 * C));
  const kernels::Precision p = kernels::Precision::kBf16;
  for (float scale : {0.9f, 0.125f}) {
    const Executed got = ExecuteForward(scale, qkv, true);
    ASSERT_TRUE(got.error.is_good()) << got.error.get_message();
    std::vector<uint16_t> want(static_cast<size_t>(B * T * C));
    std::vector<float> att(static_cast<size_t>(B * NH * T * T));
    kernels::attention_forward(kernels::Ptr(want.data(), p), att.data(), kernels::CPtr(qkv.data(), p), B, T, C, NH, p,
                               scale);
    EXPECT_EQ(got.out, want) << "scale " << scale;
    std::vector<uint16_t> unscaled(want.size());
    kernels::attention_forward(kernels::Ptr(unscaled.data(), p), att.data(), kernels::CPtr(qkv.data(), p), B, T, C,
                               NH, p);
    EXPECT_NE(got.out, unscaled) << "scored at 1/sqrt(8) = 0.354, not at " << scale;
  }
}

// Its workspace is not zero bytes, and a call that passes none fails as a GPU's would.
TEST(CudnnStandInTest, ReportsAWorkspaceAndRefusesACallWithoutIt) {
  const std::vector<uint16_t> qkv = RandomBf16(5 * 48);
  const Executed without = ExecuteForward(0.5f, qkv, false);
  EXPECT_GT(without.workspace_bytes, 0);
  EXPECT_EQ(without.error.get_code(), error_code_t::INVALID_VALUE);
  EXPECT_NE(without.error.get_message().find("the workspace"), std::string::npos) << without.error.get_message();
  EXPECT_TRUE(ExecuteForward(0.5f, qkv, true).error.is_good());
}

// The test switch (kNoPlanVariable): check_support answers "no plan" for the graphs it names,
// and only those.
TEST(CudnnStandInTest, AnswersNoPlanForTheGraphsTheSwitchNames) {
  ASSERT_EQ(setenv(kNoPlanVariable, "grouped-backward", 1), 0);
  EXPECT_TRUE(NoPlanFor(/*backward=*/true, /*grouped=*/true));
  EXPECT_FALSE(NoPlanFor(true, false));
  EXPECT_FALSE(NoPlanFor(false, true));
  const std::vector<uint16_t> qkv = RandomBf16(5 * 48);
  EXPECT_TRUE(ExecuteForward(0.5f, qkv, true).error.is_good()) << "not grouped: planned";
  ASSERT_EQ(setenv(kNoPlanVariable, "forward,grouped", 1), 0);
  EXPECT_TRUE(NoPlanFor(false, false));
  EXPECT_TRUE(NoPlanFor(true, true));
  EXPECT_FALSE(NoPlanFor(true, false));
  const Executed refused = ExecuteForward(0.5f, qkv, true);
  EXPECT_EQ(refused.error.get_code(), error_code_t::GRAPH_NOT_SUPPORTED);
  EXPECT_NE(refused.error.get_message().find("no engine config"), std::string::npos) << refused.error.get_message();
  unsetenv(kNoPlanVariable);
  EXPECT_FALSE(NoPlanFor(true, true));
}

}  // namespace
}  // namespace gantry::emucudnn::cudnn_frontend
