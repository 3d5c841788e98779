// Stall detection (coordinator/stalls.h) as pure functions: when a job is overdue, which
// generation's reports count, and how the ranks behind are named.
#include "coordinator/stalls.h"

#include <gtest/gtest.h>

namespace gantry::coordinator {
namespace {

TEST(StallDetectorTest, AJobIsOverdueAfterTheLimitOrTenStepsWhicheverIsLonger) {
  StallDetector d(/*stall_ms=*/60000);
  d.OnStep("fast", 1, 10, /*step_seconds=*/0.5, /*now_ms=*/1000);
  d.OnStep("slow", 1, 3, /*step_seconds=*/20.0, /*now_ms=*/1000);
  EXPECT_TRUE(d.Overdue(1000 + 59999).empty());
  auto due = d.Overdue(1000 + 60000);  // fast: the 60 s floor; slow: 10 x 20 s = 200 s
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].job_id, "fast");
  EXPECT_EQ(due[0].step, 10);
  EXPECT_FALSE(due[0].reported);
  due = d.Overdue(1000 + 200000);
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[1].job_id, "slow");
}

TEST(StallDetectorTest, AReportedStallEndsWithTheNextStepOfItsGenerationOnly) {
  StallDetector d(1000);
  EXPECT_FALSE(d.OnStep("j", 2, 5, 0.1, 0));
  d.MarkReported("j");
  ASSERT_EQ(d.Overdue(5000).size(), 1u);
  EXPECT_TRUE(d.Overdue(5000)[0].reported);
  EXPECT_FALSE(d.OnStep("j", 1, 9, 0.1, 6000)) << "a late report of an older generation is ignored";
  EXPECT_TRUE(d.Overdue(6000)[0].reported);
  EXPECT_TRUE(d.OnStep("j", 2, 6, 0.1, 7000)) << "the stall is over";
  EXPECT_TRUE(d.Overdue(7500).empty());
  d.MarkReported("j");
  EXPECT_FALSE(d.OnStep("j", 3, 1, 0.1, 8000)) << "a new generation starts afresh";
  d.Forget("j");
  EXPECT_EQ(d.size(), 0u);
}

TEST(DescribeStallTest, NamesTheRanksBehindAndThoseWithoutAHeartbeat) {
  std::map<int, RankProgress> ranks = {{0, {"w-000001", 40}}, {1, {"w-000002", 38}}, {3, {"w-000004", 40}}};
  EXPECT_EQ(DescribeStall(12, 75.3, 4, ranks),
            "step 12 stalled for 75.3 s: behind: rank 1 (w-000002) at collective #38; rank 2 (no heartbeat for this "
            "job); the others have completed collective #40");
}

TEST(DescribeStallTest, SaysSoWhenNoRankIsBehind) {
  std::map<int, RankProgress> ranks = {{0, {"w-000001", 7}}, {1, {"w-000002", 7}}};
  EXPECT_EQ(DescribeStall(3, 61.0, 2, ranks),
            "step 3 stalled for 61.0 s: no rank is behind (every rank has completed collective #7): a step or a "
            "collective is slow on all of them");
}

}  // namespace
}  // namespace gantry::coordinator
