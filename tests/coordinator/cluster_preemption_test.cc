// Preemption in the coordinator's Cluster, in process with fake worker sessions (the
// checkpoint-then-release path with real shard servers is tests/integration/
// teams_test.sh's): the victim's ranks are told a stop step, told a later one when rank 0
// goes past it, keep their worker when they stop, and past the grace period the job is
// released as PREEMPTED, its events naming who preempted it; the preemptor then runs on the
// worker, and the victim is placed again after it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "coordinator/cluster.h"
#include "tests/coordinator/cluster_test_util.h"
#include "tests/test_util.h"

namespace gantry::coordinator {
namespace {

class ClusterPreemptionTest : public InProcessCluster {
 protected:
  // A job of the tiny model at a priority (the record's, as SubmitJob copies it from the spec).
  std::string Submit(const std::string& name, int priority, const std::string& more_yaml = "") {
    return SubmitTinyJob(*cluster_, *store_, name, 1,
                         absl::StrCat("scheduling: {priority: ", priority, more_yaml, "}\n"), {},
                         [priority](v1::Job& j) { j.set_priority(priority); });
  }
  static const v1::PreemptJob* Preempt(const std::vector<v1::CoordinatorMessage>& ms) {
    for (const auto& m : ms) {
      if (m.has_preempt()) return &m.preempt();
    }
    return nullptr;
  }
  // Waits (5 s at most) for the job's state: the monitor releases a preemption past its grace.
  bool WaitFor(const std::string& job, v1::JobState state) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (store_->GetJob(job)->state() != state) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }
  std::string Events(const std::string& job) {
    std::string all;
    const std::vector<v1::JobEvent> events = *store_->Events(job, 0, 1000);
    for (const auto& e : events) absl::StrAppend(&all, e.message(), "\n");
    return all;
  }
};

TEST_F(ClusterPreemptionTest, PastItsGracePeriodTheVictimIsReleasedAsPreemptedAndTheUrgentJobRuns) {
  FakeSession s;
  const std::string w = cluster_->AddWorker(&s, v1::Resources());
  const std::string low = Submit("low", 0, ", preemption_grace_s: 0.3");
  ASSERT_NE(FakeSession::Assigned(s.Take()), nullptr);
  Step(w, low, 1, 5);
  ASSERT_EQ(Job(low).state(), v1::RUNNING);

  const std::string urgent = Submit("urgent", 5);
  EXPECT_EQ(Job(urgent).state(), v1::PENDING) << "no idle worker";
  auto ms = s.Take();
  const v1::PreemptJob* p = Preempt(ms);
  ASSERT_NE(p, nullptr) << "the victim's ranks are told";
  EXPECT_EQ(p->job_id(), low);
  EXPECT_EQ(p->generation(), 1);
  EXPECT_EQ(p->stop_step(), 7) << "two steps ahead of step 5 (no step time reported)";
  const v1::Job noted = Job(low);
  ASSERT_TRUE(noted.has_preemption()) << "durable before the ranks hear of it";
  EXPECT_EQ(noted.preemption().by_job(), urgent);
  EXPECT_EQ(noted.state(), v1::RUNNING);
  EXPECT_TRUE(absl::StrContains(Events(low), "preemption requested by job " + urgent + " of nobody: job " + urgent +
                                                 " (priority 5 over 0) needs 1 cpu slot and 0 are idle; it "
                                                 "checkpoints after step 7"))
      << Events(low);

  // Rank 0 went past step 7 (the message came late): a later stop step, twice as far ahead.
  Step(w, low, 1, 8);
  ms = s.Take();
  p = Preempt(ms);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->stop_step(), 12);
  EXPECT_EQ(Job(low).preemption().stop_step(), 12);

  // Its rank never reaches step 12 (stuck): past 0.3 s it is released without that checkpoint,
  // PREEMPTED, to resume from its last committed one.
  ASSERT_TRUE(WaitFor(low, v1::PREEMPTED)) << v1::JobState_Name(Job(low).state());
  const v1::Job preempted = Job(low);
  EXPECT_FALSE(preempted.has_preemption());
  EXPECT_EQ(preempted.preemptions(), 1);
  EXPECT_EQ(preempted.restarts(), 0) << "a preemption is not a failure";
  EXPECT_EQ(preempted.workers_size(), 0);
  EXPECT_TRUE(absl::StrContains(Events(low), "no checkpoint of step 12 within its grace period of 0.3 s: stopped; it "
                                             "resumes from its last committed checkpoint (step 0)"))
      << Events(low);
  EXPECT_EQ(registry_.GetCounter("gantry_coordinator_preemptions_total", "", {{"team", ""}}).Value(), 1);
  cluster_->WaitForCommits();  // the pass the release asked for
  ASSERT_TRUE(WaitFor(urgent, v1::SCHEDULED));
  const v1::Assignment* a = nullptr;
  ms = s.Take();
  a = FakeSession::Assigned(ms);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->job_id(), urgent);

  // The urgent job ends: the preempted one is placed again (generation 2).
  v1::JobDone ok;
  ok.set_job_id(urgent);
  ok.set_generation(1);
  ok.set_rank(0);
  ok.set_ok(true);
  cluster_->OnDone(w, ok);
  cluster_->WaitForCommits();
  ASSERT_TRUE(WaitFor(low, v1::SCHEDULED));
  EXPECT_EQ(Job(low).generation(), 2);
  EXPECT_EQ(Job(urgent).state(), v1::SUCCEEDED);
}

TEST_F(ClusterPreemptionTest, RanksThatStopKeepTheirWorkersUntilTheLastOneHasStopped) {
  FakeSession s1, s2;
  const std::string w1 = cluster_->AddWorker(&s1, v1::Resources());
  const std::string w2 = cluster_->AddWorker(&s2, v1::Resources());
  const std::string low = SubmitTinyJob(*cluster_, *store_, "low", 2, "parallel: {dp: 2}\n");
  ASSERT_EQ(Job(low).workers_size(), 2);
  Step(w1, low, 1, 3);
  const std::string urgent = Submit("urgent", 5);
  const v1::Job noted = Job(low);
  ASSERT_TRUE(noted.has_preemption());
  for (FakeSession* s : {&s1, &s2}) {
    const auto ms = s->Take();
    ASSERT_NE(Preempt(ms), nullptr) << "every worker of the job is told";
  }
  auto stopped = [&](const std::string& w, int rank) {
    v1::JobDone d;
    d.set_job_id(low);
    d.set_generation(1);
    d.set_rank(rank);
    d.set_code(static_cast<int>(absl::StatusCode::kAborted));
    d.set_error("preempted");
    d.set_preempted(true);
    cluster_->OnDone(w, d);
    cluster_->WaitForCommits();
  };
  stopped(Job(low).workers(0), 0);
  EXPECT_EQ(Job(low).state(), v1::RUNNING) << "one rank stopped: its worker stays the job's";
  EXPECT_EQ(Job(urgent).state(), v1::PENDING);
  // The last rank stopped and no checkpoint of the stop step committed (no shard server here):
  // released now, not at the end of the grace period (120 s).
  stopped(Job(low).workers(1), 1);
  EXPECT_EQ(Job(low).state(), v1::PREEMPTED);
  EXPECT_TRUE(absl::StrContains(Events(low), absl::StrCat("its ranks stopped after step ", noted.preemption().stop_step(),
                                                          " but that checkpoint was not committed: it resumes from "
                                                          "its last committed checkpoint (step 0)")))
      << Events(low);
  EXPECT_TRUE(WaitFor(urgent, v1::SCHEDULED));
}

TEST_F(ClusterPreemptionTest, EqualPriorityAndNotPreemptibleJobsAreLeftRunning) {
  FakeSession s1, s2;
  const std::string w1 = cluster_->AddWorker(&s1, v1::Resources());
  const std::string w2 = cluster_->AddWorker(&s2, v1::Resources());
  const std::string same = Submit("same", 5);
  const std::string pinned = Submit("pinned", 0, ", preemptible: false");
  for (const auto& [w, job] : {std::pair{w1, same}, std::pair{w2, pinned}}) Step(w, job, 1, 3);
  s1.Take();
  s2.Take();
  const std::string urgent = Submit("urgent", 5);
  cluster_->WaitForCommits();
  EXPECT_EQ(Preempt(s1.Take()), nullptr);
  EXPECT_EQ(Preempt(s2.Take()), nullptr);
  EXPECT_FALSE(Job(same).has_preemption());
  EXPECT_FALSE(Job(pinned).has_preemption());
  EXPECT_EQ(Job(urgent).state(), v1::PENDING);
}

}  // namespace
}  // namespace gantry::coordinator
