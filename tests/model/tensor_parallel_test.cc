// model::TensorParallel on its own: which buffers each exchange reads and writes, how many
// floats it moves, the rounding of mixed precision, and the errors it keeps. The group is
// tests/fake_communicator.h's pair, whose peer holds `kPeer` times this rank's values.
#include "model/tensor_parallel.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/types.h"
#include "model/run_context.h"
#include "tests/fake_communicator.h"

namespace gantry::model {
namespace {

constexpr float kPeer = 10.f;
using TwoRanks = fakes::MirroredPair;

// One rank's context over a (B, T) = (2, 4) step of a 2-layer model at tp 2, with its
// activations in `act` (filled with i + 0.25, values that bf16 cannot hold exactly).
struct Rank {
  Rank(bool sequence_parallel, int tp_rank, kernels::Precision p = kernels::Precision::kFp32)
      : shard{2, tp_rank}, comm(tp_rank) {
    shard.sequence_parallel = sequence_parallel;
    ctx = std::make_unique<RunContext>(config, shard, &kernels::CpuBackend());
    ctx->set_precision(p);
    jobspec::LayoutOptions lo;
    lo.half = p != kernels::Precision::kFp32;
    ctx->set_layout(jobspec::LayoutActivations(config, shard, B, T, lo));
    act.resize(ctx->off().total);
    for (size_t i = 0; i < act.size(); ++i) act[i] = static_cast<float>(i % 1000) + 0.25f;
    ctx->set_base(act.data());
    tp = std::make_unique<TensorParallel>(ctx.get());
    tp->set_comm(&comm);
  }
  jobspec::GPTConfig config{16, 32, 2, 2, 8};  // max_seq_len, vocab, layers, heads, n_embd
  jobspec::ModelShard shard;
  static constexpr int B = 2, T = 4, BT = B * T;
  TwoRanks comm;
  std::unique_ptr<RunContext> ctx;
  std::unique_ptr<TensorParallel> tp;
  std::vector<float> act;
};

TEST(TensorParallelTest, WithoutSequenceParallelismPartialSumsAreAllReducedInPlace) {
  Rank r(false, 0);
  const size_t n = static_cast<size_t>(Rank::BT) * 8;
  float* proj = r.ctx->A(r.ctx->off().proj);
  const std::vector<float> before(proj, proj + n);
  EXPECT_FALSE(r.tp->sp());
  EXPECT_EQ(r.tp->Rows(Rank::BT), Rank::BT);
  EXPECT_EQ(r.tp->SumPartial(proj, Rank::BT, ""), proj);
  ASSERT_EQ(r.comm.log.size(), 1u);
  EXPECT_EQ(r.comm.log[0], std::make_pair(std::string("all_reduce"), n));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(proj[i], before[i] * (1.f + kPeer)) << i;
  // A norm's rows are the GEMM's rows: nothing gathered, and the norm's gradients accumulate in place.
  float* ln1 = r.ctx->A(r.ctx->off().ln1);
  EXPECT_EQ(r.tp->AllRows(ln1, Rank::BT).data, ln1);
  float g[16] = {};
  EXPECT_EQ(r.tp->NormGrads(g, 16), g);
  EXPECT_EQ(r.comm.log.size(), 1u);
  EXPECT_TRUE(r.ctx->status().ok());
}

TEST(TensorParallelTest, MixedPrecisionRoundsTheSumAsAutocastWould) {
  Rank r(false, 1, kernels::Precision::kBf16);
  const size_t n = static_cast<size_t>(Rank::BT) * 8;
  float* dln = r.ctx->A(r.ctx->off().dln);
  const std::vector<float> before(dln, dln + n);
  EXPECT_EQ(r.tp->SumNormGrad(dln, Rank::BT), dln);
  int inexact = 0;
  for (size_t i = 0; i < n; ++i) {
    const float sum = before[i] * (1.f + kPeer);
    ASSERT_EQ(dln[i], kernels::RoundToBf16(sum)) << i;
    inexact += dln[i] != sum;
  }
  EXPECT_GT(inexact, 0);  // the rounding did something: the check above could fail
}

TEST(TensorParallelTest, SequenceParallelismReduceScattersAndGathersThisRanksRows) {
  for (int rank : {0, 1}) {
    Rank r(true, rank);
    const jobspec::ActivationLayout& o = r.ctx->off();
    const int R = Rank::BT / 2;
    const size_t C = 8, rows = static_cast<size_t>(R) * C;
    ASSERT_TRUE(r.tp->sp());
    EXPECT_EQ(r.tp->Rows(Rank::BT), R);
    // Partial sums over all rows → this rank's rows, summed, in proj_rows.
    float* proj = r.ctx->A(o.proj);
    const std::vector<float> partial(proj, proj + 2 * rows);
    float* summed = r.tp->SumPartial(proj, Rank::BT, "");
    EXPECT_EQ(summed, r.ctx->A(o.proj_rows));
    for (size_t i = 0; i < rows; ++i) ASSERT_EQ(summed[i], partial[rank * rows + i] * (1.f + kPeer)) << i;
    // A norm's rows → every row, in gathered, this rank's at its place.
    float* ln = r.ctx->A(o.ln1);
    const std::vector<float> mine(ln, ln + rows);
    const kernels::Ptr all = r.tp->AllRows(ln, Rank::BT);
    EXPECT_EQ(all.data, r.ctx->A(o.gathered));
    for (size_t i = 0; i < rows; ++i) {
      ASSERT_EQ(all.as_f32()[rank * rows + i], mine[i]);
      ASSERT_EQ(all.as_f32()[(1 - rank) * rows + i], mine[i] * kPeer);
    }
    // A norm's weight gradients: a zeroed scratch for this rank's rows' part, then the group's
    // sum added to what the buffer already held (earlier micro-batches).
    float g[16];
    for (int i = 0; i < 16; ++i) g[i] = 100.f + static_cast<float>(i);
    float* part = r.tp->NormGrads(g, 16);
    EXPECT_EQ(part, r.ctx->A(o.dnorm));
    for (int i = 0; i < 16; ++i) ASSERT_EQ(part[i], 0.f);
    for (int i = 0; i < 16; ++i) part[i] = static_cast<float>(i);
    r.tp->FinishNormGrads(g, 16);
    for (int i = 0; i < 16; ++i) ASSERT_EQ(g[i], 100.f + static_cast<float>(i) * (2.f + kPeer)) << i;
    const std::vector<std::pair<std::string, size_t>> want = {
        {"reduce_scatter", rows}, {"all_gather", rows}, {"all_reduce", 16}};
    EXPECT_EQ(r.comm.log, want);
    EXPECT_TRUE(r.ctx->status().ok());
  }
}

TEST(TensorParallelTest, SixteenBitRowsGatherAsPairsOfElements) {
  Rank r(true, 0, kernels::Precision::kBf16);
  const size_t elems = static_cast<size_t>(Rank::BT / 2) * 8;
  r.tp->AllRows(r.ctx->H(r.ctx->A(r.ctx->off().ln1)), Rank::BT);
  ASSERT_EQ(r.comm.log.size(), 1u);
  EXPECT_EQ(r.comm.log[0], std::make_pair(std::string("all_gather"), elems / 2));
}

TEST(TensorParallelTest, SequenceParallelismWithoutAGroupIsAnError) {
  Rank r(true, 0);
  r.tp->set_comm(nullptr);
  r.tp->SumPartial(r.ctx->A(r.ctx->off().proj), Rank::BT, "");
  EXPECT_EQ(r.ctx->status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.ctx->status().message().find("without a tensor-parallel group"), std::string::npos)
      << r.ctx->status();
  // Without sequence parallelism and without a group, the all-reduce is the identity (a shard
  // tested alone).
  Rank alone(false, 0);
  alone.tp->set_comm(nullptr);
  float* proj = alone.ctx->A(alone.ctx->off().proj);
  const float first = proj[0];
  alone.tp->SumPartial(proj, Rank::BT, "");
  EXPECT_EQ(proj[0], first);
  EXPECT_TRUE(alone.ctx->status().ok());
}

TEST(TensorParallelTest, TheFirstFailedCollectiveIsTheRunsError) {
  Rank r(true, 0);
  r.comm.fail_from = 1;  // the second collective and those after it fail
  r.tp->SumPartial(r.ctx->A(r.ctx->off().proj), Rank::BT, "");
  EXPECT_TRUE(r.ctx->status().ok());
  r.tp->AllRows(r.ctx->A(r.ctx->off().ln1), Rank::BT);
  r.tp->SumNormGrad(r.ctx->A(r.ctx->off().dln), Rank::BT);
  EXPECT_EQ(r.ctx->status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(r.ctx->status().message().find("all_gather"), std::string::npos) << r.ctx->status();
}

}  // namespace
}  // namespace gantry::model
