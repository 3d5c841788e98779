// train::CommWork and BufferPool on the cpu backend: the buffers the pool hands out and keeps,
// and the three reductions of a bucket over tests/fake_communicator.h's pair (whose peer holds
// 10 times this rank's values): what each collective is given, the mean, bf16's rounding, the
// short last piece, the accumulation over micro-batches, and the buffers given back; and
// Reduce, which runs a BucketReduction's one over its group.
#include "worker/train/comm_work.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/types.h"
#include "comm/comm_thread.h"
#include "tests/fake_communicator.h"

namespace gantry::train {
namespace {

using Pair = fakes::MirroredPair;

std::vector<float> Ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.5f + static_cast<float>(i) * 1.001f;  // not bf16-exact
  return v;
}

TEST(BufferPoolTest, ReusesAFreeBufferThatFitsButNotAMuchLargerOne) {
  BufferPool pool;
  kernels::Backend* cpu = &kernels::CpuBackend();
  float* a = pool.Take(100, cpu);
  pool.Give(a);
  EXPECT_EQ(pool.Take(90, cpu), a);  // within a quarter: the same buffer
  float* b = pool.Take(100, cpu);     // a is in use: a new one
  EXPECT_NE(b, a);
  pool.Give(a);
  pool.Give(b);
  float* c = pool.Take(50, cpu);  // 100 > 50 + 50/4: a buffer of its own size
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  EXPECT_EQ(pool.allocated_bytes(), (100 + 100 + 50) * sizeof(float));
  pool.ReleaseFree();  // a and b are free, c is taken
  EXPECT_EQ(pool.allocated_bytes(), 50 * sizeof(float));
}

TEST(CommWorkTest, RunsOnTheHostForAHostBackend) {
  auto w = CommWork::Create(&kernels::CpuBackend());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE((*w)->on_peer());
  EXPECT_EQ((*w)->backend(), &kernels::CpuBackend());
  EXPECT_TRUE((*w)->BindThread().ok());
}

TEST(CommWorkTest, AllReduceMeanInFp32AndBf16) {
  auto w = *CommWork::Create(&kernels::CpuBackend());
  const size_t n = 37;
  const float inv = 0.5f;
  for (bool bf16 : {false, true}) {
    Pair c(0);
    std::vector<float> g = Ramp(n);
    const std::vector<float> before = g;
    ASSERT_TRUE(w->AllReduceMean(c, g.data(), n, inv, bf16).ok());
    ASSERT_EQ(c.log.size(), 1u);
    EXPECT_EQ(c.log[0].first, bf16 ? "all_reduce_bf16" : "all_reduce");
    EXPECT_EQ(c.log[0].second, n);
    for (size_t i = 0; i < n; ++i) {
      float want = before[i] * 11.f * inv;
      if (bf16) {  // both values rounded to bf16, summed, the sum rounded, then widened and scaled
        const float mine = kernels::RoundToBf16(before[i]);
        want = kernels::RoundToBf16(mine + kernels::RoundToBf16(mine * 10.f)) * inv;
      }
      ASSERT_EQ(g[i], want) << i << (bf16 ? " bf16" : " fp32");
    }
  }
  EXPECT_EQ(w->pool().allocated_bytes(), (n + 1) / 2 * sizeof(float));  // bf16's staging, given back
  w->pool().ReleaseFree();
  EXPECT_EQ(w->pool().allocated_bytes(), 0u);
}

TEST(CommWorkTest, AGroupOfOneOnlyScales) {
  auto w = *CommWork::Create(&kernels::CpuBackend());
  comm::SoloCommunicator solo;
  std::vector<float> g = Ramp(8);
  const std::vector<float> before = g;
  ASSERT_TRUE(w->AllReduceMean(solo, g.data(), g.size(), 0.25f, true).ok());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], before[i] * 0.25f);
  ASSERT_TRUE(w->ReduceScatterMean(solo, g.data(), 2, 6, 4, 2, 6, 0.5f, false).ok());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], before[i] * 0.25f * (i >= 2 && i < 6 ? 0.5f : 1.f)) << i;
}

TEST(CommWorkTest, ReduceScatterMeanWritesThisRanksPieceOnlyIncludingTheShortLastOne) {
  auto w = *CommWork::Create(&kernels::CpuBackend());
  // A bucket [3, 3 + 11) of a 20-float buffer over 2 ranks: pieces of 6, rank 1's is short (5).
  const size_t begin = 3, end = 14, piece = 6;
  for (int rank : {0, 1}) {
    for (bool bf16 : {false, true}) {
      Pair c(rank);
      std::vector<float> grads = Ramp(20);
      const std::vector<float> before = grads;
      const size_t pb = begin + piece * static_cast<size_t>(rank), pe = std::min(end, pb + piece);
      ASSERT_TRUE(w->ReduceScatterMean(c, grads.data(), begin, end, piece, pb, pe, 0.5f, bf16).ok());
      ASSERT_EQ(c.log.size(), 1u);
      EXPECT_EQ(c.log[0].second, piece);
      for (size_t i = 0; i < grads.size(); ++i) {
        if (i < pb || i >= pe) {
          ASSERT_EQ(grads[i], before[i]) << "outside the piece: " << i;
          continue;
        }
        float want = before[i] * 11.f * 0.5f;
        if (bf16) {
          const float mine = kernels::RoundToBf16(before[i]);
          want = kernels::RoundToBf16(mine + kernels::RoundToBf16(mine * 10.f)) * 0.5f;
        }
        ASSERT_EQ(grads[i], want) << "rank " << rank << " bf16 " << bf16 << " at " << i;
      }
    }
  }
}

TEST(CommWorkTest, ReduceScatterAccumulateAddsEachMicroBatchAndGivesTheWorkBack) {
  auto w = *CommWork::Create(&kernels::CpuBackend());
  const size_t piece = 4;
  std::vector<float> shard(piece, -1.f);
  Pair c(1);
  std::vector<float> sum(piece, 0.f);
  for (int micro = 0; micro < 3; ++micro) {
    float* work = w->pool().Take(2 * piece, w->backend());
    for (size_t i = 0; i < 2 * piece; ++i) work[i] = static_cast<float>(micro + 1) * static_cast<float>(i);
    for (size_t i = 0; i < piece; ++i) sum[i] += work[piece + i] * 11.f * 0.25f;
    ASSERT_TRUE(w->ReduceScatterAccumulate(c, work, shard.data(), piece, micro == 0, 0.25f, false).ok());
    for (size_t i = 0; i < piece; ++i) ASSERT_EQ(shard[i], sum[i]) << "micro " << micro << " at " << i;
  }
  // Every buffer taken went back: the next taker reuses one.
  const size_t bytes = w->pool().allocated_bytes();
  w->pool().ReleaseFree();
  EXPECT_GT(bytes, 0u);
  EXPECT_EQ(w->pool().allocated_bytes(), 0u);
}

TEST(CommWorkTest, ReduceRunsItsKindsReductionOverItsGroupOrElseTheThreads) {
  auto w = *CommWork::Create(&kernels::CpuBackend());
  // A bucket [3, 14) of a 20-float buffer, as rank 1 of 2 holds it: pieces of 6, its own [9, 14)
  // short. The thread's group and an expert range's own tell apart by their peers' values.
  using Kind = BucketReduction::Kind;
  for (Kind kind : {Kind::kAllReduceMean, Kind::kReduceScatterMean, Kind::kReduceScatterAccumulate}) {
    for (bool own_group : {false, true}) {
      Pair dp(1, 10.f), group(1, 3.f), direct(1, own_group ? 3.f : 10.f);
      const bool bf16 = own_group;  // both precisions, one with each group
      std::vector<float> grads = Ramp(20), want = grads;
      std::vector<float> shard(6, -1.f), want_shard = shard;
      BucketReduction r;
      r.kind = kind;
      r.group = own_group ? &group : nullptr;
      r.grads = grads.data();
      r.begin = 3;
      r.end = 14;
      r.piece = 6;
      r.pb = 9;
      r.pe = 14;
      r.shard = shard.data();
      r.first = true;
      r.inv = 0.5f;
      r.bf16 = bf16;
      float* work = nullptr;
      if (kind == Kind::kReduceScatterAccumulate) {  // two buffers of the pool's, alike
        r.work = w->pool().Take(12, w->backend());
        work = w->pool().Take(12, w->backend());
        for (size_t i = 0; i < 12; ++i) r.work[i] = work[i] = grads[3 + i];
      }
      ASSERT_TRUE(w->Reduce(dp, r).ok());
      absl::Status s;
      switch (kind) {
        case Kind::kAllReduceMean:
          s = w->AllReduceMean(direct, want.data() + 3, 11, 0.5f, bf16);
          break;
        case Kind::kReduceScatterMean:
          s = w->ReduceScatterMean(direct, want.data(), 3, 14, 6, 9, 14, 0.5f, bf16);
          break;
        case Kind::kReduceScatterAccumulate:
          s = w->ReduceScatterAccumulate(direct, work, want_shard.data(), 6, true, 0.5f, bf16);
          break;
      }
      ASSERT_TRUE(s.ok()) << s;
      const int at = static_cast<int>(kind);
      EXPECT_EQ(grads, want) << "kind " << at << " own group " << own_group;
      EXPECT_EQ(shard, want_shard) << "kind " << at << " own group " << own_group;
      ASSERT_EQ(direct.log.size(), 1u);
      EXPECT_EQ((own_group ? group : dp).log, direct.log) << "kind " << at;
      EXPECT_TRUE((own_group ? dp : group).log.empty()) << "kind " << at << " own group " << own_group;
    }
  }
  w->pool().ReleaseFree();
  EXPECT_EQ(w->pool().allocated_bytes(), 0u);  // the work buffers went back
}

TEST(CommWorkTest, ACollectivesErrorIsReturnedAndTheBuffersStillGoBack) {
  auto w = *CommWork::Create(&kernels::CpuBackend());
  Pair c(0);
  c.fail_from = 0;
  std::vector<float> grads = Ramp(16);
  absl::Status s = w->ReduceScatterMean(c, grads.data(), 0, 16, 8, 0, 8, 0.5f, true);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("reduce_scatter_bf16"), std::string::npos) << s;
  w->pool().ReleaseFree();
  EXPECT_EQ(w->pool().allocated_bytes(), 0u);
}

}  // namespace
}  // namespace gantry::train
