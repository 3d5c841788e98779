// The job state machine: what may follow what, and what a transition records.
#include "coordinator/job_state.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace gantry::coordinator {
namespace {

TEST(JobStateTest, TheTableAllowsTheLifeOfAJobAndNothingAfterItsEnd) {
  const v1::JobState all[] = {v1::PENDING,   v1::SCHEDULED, v1::RUNNING,   v1::SUCCEEDED,
                              v1::FAILED,    v1::CANCELLED, v1::RESTARTING, v1::PREEMPTED};
  int allowed = 0;
  for (v1::JobState from : all) {
    for (v1::JobState to : all) {
      allowed += TransitionAllowed(from, to);
      if (Terminal(from)) {
        EXPECT_FALSE(TransitionAllowed(from, to)) << "a final state is final";
      }
      if (from == to) {
        EXPECT_FALSE(TransitionAllowed(from, to));
      }
    }
  }
  EXPECT_EQ(allowed, 3 + 6 + 5 + 3 + 3) << "the table in job_state.h";
  EXPECT_TRUE(TransitionAllowed(v1::RESTARTING, v1::SCHEDULED));
  EXPECT_TRUE(TransitionAllowed(v1::RUNNING, v1::PREEMPTED));
  EXPECT_TRUE(TransitionAllowed(v1::PREEMPTED, v1::SCHEDULED)) << "placed again, it resumes";
  EXPECT_FALSE(TransitionAllowed(v1::PENDING, v1::PREEMPTED)) << "only a placed job is preempted";
  EXPECT_FALSE(TransitionAllowed(v1::PREEMPTED, v1::RUNNING));
  EXPECT_FALSE(TransitionAllowed(v1::PENDING, v1::RUNNING)) << "placed before it runs";
  EXPECT_FALSE(TransitionAllowed(v1::RESTARTING, v1::RUNNING)) << "placed again before it runs";
}

TEST(JobStateTest, ATransitionStoresTheRecordThenItsMessageThenItsState) {
  testing::TempDir dir;
  auto store = Store::Open(dir.File("db"));
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Job job;
  job.set_state(v1::PENDING);
  auto id = (*store)->CreateJob(job);
  ASSERT_TRUE(id.ok());
  job = *(*store)->GetJob(*id);
  std::vector<v1::JobEvent> seen;
  EventSink sink = [&](v1::JobEvent e) {
    seen.push_back(e);
    return (*store)->AppendEvent(std::move(e), true).status();
  };
  ASSERT_TRUE(Transition(**store, sink, job, v1::SCHEDULED, "placed: w-000001").ok());
  EXPECT_EQ((*store)->GetJob(*id)->state(), v1::SCHEDULED) << "stored";
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].message(), "placed: w-000001");
  EXPECT_EQ(seen[1].state(), v1::SCHEDULED);
  ASSERT_TRUE(Transition(**store, sink, job, v1::SUCCEEDED).ok());
  EXPECT_EQ(seen.size(), 3u) << "no message, the state alone";

  auto refused = Transition(**store, sink, job, v1::RUNNING, "late report");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("cannot go from SUCCEEDED to RUNNING"), absl::string_view::npos) << refused;
  EXPECT_EQ((*store)->GetJob(*id)->state(), v1::SUCCEEDED) << "nothing stored";
  EXPECT_EQ(seen.size(), 3u) << "nothing recorded";
}

}  // namespace
}  // namespace gantry::coordinator
