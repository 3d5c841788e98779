// The agent's message rules (worker/agent/dispatch.h): a new placement joins the old one's
// ranks first, further ranks of it just run, restart and cancel stop the job it runs, abort
// marks it failed, and messages about other jobs do nothing.
#include "worker/agent/dispatch.h"

#include <gtest/gtest.h>

namespace gantry::agent {
namespace {

using A = MessageDispatch::Action;

v1::CoordinatorMessage Assign(const std::string& job, int64_t generation, int rank) {
  v1::CoordinatorMessage m;
  m.mutable_assign()->set_job_id(job);
  m.mutable_assign()->set_generation(generation);
  m.mutable_assign()->set_rank(rank);
  return m;
}

TEST(MessageDispatchTest, APlacementsFirstRankJoinsTheOldOnesAndTheOthersJustRun) {
  MessageDispatch d;
  v1::CoordinatorMessage attached;
  attached.set_worker_id("w-000001");
  EXPECT_EQ(d.On(attached), A::kAttached);
  EXPECT_EQ(d.On(Assign("job-1", 1, 0)), A::kNewPlacement);
  EXPECT_EQ(d.On(Assign("job-1", 1, 1)), A::kRunRank);  // a second GPU's rank
  EXPECT_EQ(d.On(Assign("job-1", 2, 0)), A::kNewPlacement);  // placed again: a new generation
  EXPECT_EQ(d.On(Assign("job-2", 2, 0)), A::kNewPlacement);  // another job, same number
  EXPECT_EQ(d.job_id(), "job-2");
  EXPECT_EQ(d.generation(), 2);
}

TEST(MessageDispatchTest, RestartAndCancelStopTheJobItRunsAbortMarksItFailed) {
  MessageDispatch d;
  d.On(Assign("job-1", 3, 0));
  v1::CoordinatorMessage m;
  m.set_restart_job_id("job-1");
  EXPECT_EQ(d.On(m), A::kAbort);
  m.Clear();
  m.set_cancel_job_id("job-1");
  EXPECT_EQ(d.On(m), A::kAbort);
  m.Clear();
  m.set_abort_job_id("job-1");
  EXPECT_EQ(d.On(m), A::kMarkFailed);
}

TEST(MessageDispatchTest, APreemptionReachesOnlyThePlacementItNames) {
  MessageDispatch d;
  auto preempt = [](const std::string& job, int64_t generation) {
    v1::CoordinatorMessage m;
    m.mutable_preempt()->set_job_id(job);
    m.mutable_preempt()->set_generation(generation);
    m.mutable_preempt()->set_stop_step(40);
    return m;
  };
  EXPECT_EQ(d.On(preempt("job-1", 2)), A::kNone) << "nothing runs yet";
  d.On(Assign("job-1", 2, 0));
  EXPECT_EQ(d.On(preempt("job-1", 2)), A::kPreempt);
  EXPECT_EQ(d.On(preempt("job-1", 1)), A::kNone) << "an earlier placement's";
  EXPECT_EQ(d.On(preempt("job-0", 2)), A::kNone) << "another job's";
}

TEST(MessageDispatchTest, MessagesAboutAnotherJobOrBeforeAnyDoNothing) {
  MessageDispatch d;
  v1::CoordinatorMessage m;
  m.set_cancel_job_id("job-9");
  EXPECT_EQ(d.On(m), A::kNone);  // nothing runs yet
  EXPECT_EQ(d.On(v1::CoordinatorMessage()), A::kNone);
  d.On(Assign("job-1", 1, 0));
  for (int kind = 0; kind < 3; ++kind) {
    v1::CoordinatorMessage other;  // a late message of a job this worker no longer runs
    if (kind == 0) other.set_restart_job_id("job-0");
    if (kind == 1) other.set_cancel_job_id("job-0");
    if (kind == 2) other.set_abort_job_id("job-0");
    EXPECT_EQ(d.On(other), A::kNone) << kind;
  }
  EXPECT_EQ(d.On(v1::CoordinatorMessage()), A::kNone);
  EXPECT_EQ(d.job_id(), "job-1");
}

}  // namespace
}  // namespace gantry::agent
