// Over 700 lines: one scenario a test, each driving the real Cluster through a restart.
// Restarts and stale workers, in process: the coordinator's Cluster with fake worker sessions,
// and a shard server's ParamService over loopback gRPC.
//  - A lost worker sends its job RESTARTING, and it is placed again at the next generation on
//    the spare worker; scheduling.max_restarts bounds it.
//  - No step is applied twice: after the restart, the stale generation's step reports,
//    checkpoint parts and ends are refused (the job's progress, commits and state stay) and the
//    stale worker is told to drop the job; its gradient pushes to the shard server are refused
//    too, and so is a replay of a step the new generation already applied.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "coordinator/cluster.h"
#include "coordinator/placement.h"
#include "tests/coordinator/cluster_test_util.h"
#include "shardserver/param_service.h"
#include "tests/test_util.h"

namespace gantry::coordinator {
namespace {

class RestartTest : public InProcessCluster {
 protected:
  std::string Submit(int max_restarts, int dp = 1) {
    return SubmitTinyJob(*cluster_, *store_, "r", dp,
                         absl::StrCat("parallel: {dp: ", dp, "}\nscheduling: {max_restarts: ", max_restarts, "}\n"));
  }
  static const v1::Assignment* Assigned(const std::vector<v1::CoordinatorMessage>& ms) {
    return FakeSession::Assigned(ms);
  }
};

TEST_F(RestartTest, ALostWorkerRestartsTheJobAndStaleMessagesAreRefused) {
  FakeSession s1, s2;
  const std::string w1 = cluster_->AddWorker(&s1, v1::Resources());
  const std::string w2 = cluster_->AddWorker(&s2, v1::Resources());
  const std::string job = Submit(/*max_restarts=*/1);
  const auto m1 = s1.Take();  // the assignment points into it
  const v1::Assignment* a = Assigned(m1);
  ASSERT_NE(a, nullptr) << "placed on the first idle worker";
  EXPECT_EQ(a->generation(), 1);
  Step(w1, job, 1, 5);
  EXPECT_EQ(Job(job).steps_done(), 5);

  cluster_->RemoveWorker(w1, "its attach stream closed");
  const v1::Job after = Job(job);
  EXPECT_EQ(after.restarts(), 1);
  EXPECT_EQ(after.generation(), 2) << "placed again at once on the spare worker";
  EXPECT_EQ(after.state(), v1::SCHEDULED);
  EXPECT_NE(after.reason().find("worker " + w1), std::string::npos) << after.reason();
  const auto m2 = s2.Take();
  const v1::Assignment* b = Assigned(m2);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->generation(), 2);
  Step(w2, job, 2, 3);  // resumed from a checkpoint of step 2
  EXPECT_EQ(Job(job).steps_done(), 3);
  EXPECT_EQ(Job(job).state(), v1::RUNNING);

  // The old generation, replayed by a worker that comes back (re-attached with a new id).
  FakeSession s3;
  const std::string w3 = cluster_->AddWorker(&s3, v1::Resources());
  (void)s3.Take();
  Step(w3, job, 1, 6);
  EXPECT_EQ(Job(job).steps_done(), 3) << "a stale step report moves nothing";
  bool dropped = false;
  for (const auto& m : s3.Take()) dropped = dropped || m.restart_job_id() == job;
  EXPECT_TRUE(dropped) << "the stale worker is told to drop the job";
  v1::CheckpointPart part;
  part.set_job_id(job);
  part.set_generation(1);
  part.set_step(6);
  part.set_manifest_json("{}");
  cluster_->OnCheckpointPart(w3, part);
  auto events = *store_->Events(job, 0, 1000);
  for (const auto& e : events) {
    EXPECT_EQ(e.message().find("checkpoint of step 6"), std::string::npos) << "a stale part is never committed: " << e.message();
  }
  v1::JobDone d;
  d.set_job_id(job);
  d.set_generation(1);
  d.set_ok(false);
  d.set_code(static_cast<int>(absl::StatusCode::kUnavailable));
  d.set_error("stale");
  cluster_->OnDone(w3, d);
  d.set_ok(true);
  cluster_->OnDone(w3, d);
  EXPECT_EQ(Job(job).state(), v1::RUNNING) << "a stale end neither fails nor finishes the job";
  EXPECT_EQ(Job(job).restarts(), 1);
  EXPECT_EQ(Job(job).generation(), 2);

  // A second loss is past max_restarts 1: FAILED, saying so.
  cluster_->RemoveWorker(w2, "heartbeat timeout");
  const v1::Job failed = Job(job);
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_NE(failed.reason().find("scheduling.max_restarts is 1"), std::string::npos) << failed.reason();
  // Two placements, a restart decision and a failure read the spec; the coordinator parsed
  // it once (this job was stored without Cluster::RememberSpec, as after a restart).
  EXPECT_EQ(registry_.GetCounter("gantry_coordinator_spec_parses_total", "").Value(), 1.0);
}

// A cluster with its own store and registry, for tests with options of their own.
struct OwnCluster {
  explicit OwnCluster(const ClusterOptions& o)
      : store(*Store::Open(dir.File("db"))), cluster(store.get(), &registry, o) {}
  testing::TempDir dir;
  metrics::Registry registry;
  std::unique_ptr<Store> store;
  Cluster cluster;
};

// Found in review (no test had reached it): a placement whose write fails (the store's disk)
// sends no assignment and leaves the job queued, and the monitor tries again (the pass was
// ended before, and nothing placed the job until the next event). Two writes fail: the
// submission's pass and the monitor's end-of-grace pass (its first round) fail, so only the
// retry can place the job. It is then placed once: one assignment, generation 1.
TEST_F(RestartTest, APlacementWhoseWriteFailsIsRetriedAndPlacedOnce) {
  FakeSession s;
  cluster_->AddWorker(&s, v1::Resources());
  (void)s.Take();  // its id
  const std::string job =
      SubmitTinyJob(*cluster_, *store_, "r", 1, "parallel: {dp: 1}\n", [&] { store_->FailNextWrites(2); });
  EXPECT_EQ(Assigned(s.Take()), nullptr) << "an assignment went out though its placement was not stored";
  EXPECT_EQ(Job(job).state(), v1::PENDING) << "still queued";
  EXPECT_EQ(Job(job).generation(), 0);
  std::vector<v1::CoordinatorMessage> got;
  testing::PollUntil(
      [&] {
        for (auto& m : s.Take()) got.push_back(std::move(m));
        return Assigned(got) != nullptr;
      },
      std::chrono::seconds(20));
  const v1::Assignment* a = Assigned(got);
  ASSERT_NE(a, nullptr) << "the job was never placed after its failed write";
  EXPECT_EQ(a->generation(), 1);
  int assignments = 0;
  for (const auto& m : got) assignments += m.has_assign();
  EXPECT_EQ(assignments, 1);
  EXPECT_EQ(Job(job).state(), v1::SCHEDULED);
  EXPECT_EQ(Job(job).generation(), 1);
}

// A step that does not come within the stall limit: the coordinator compares the ranks'
// last completed collectives (from their heartbeats) and names the rank behind, in the job
// record (describe) and as an event; the next step clears it.
// A worker that falls silent (a stopped process) is counted out, and its attach stream is
// ended: should it come back, it attaches again rather than heartbeat on a stream that is
// never given work. A worker whose stream closes is not ended twice.
TEST(MembershipTest, ASilentWorkerIsCountedOutAndItsStreamEnded) {
  ClusterOptions o;
  o.worker_timeout_ms = 200;
  OwnCluster c(o);
  Cluster& cluster = c.cluster;
  FakeSession silent, closed;
  const std::string w1 = cluster.AddWorker(&silent, v1::Resources());
  const std::string w2 = cluster.AddWorker(&closed, v1::Resources());
  cluster.RemoveWorker(w2, "its attach stream closed");
  testing::PollUntil(
      [&] {
        cluster.Workers();
        return !silent.Ended().empty();
      },
      std::chrono::seconds(10));
  EXPECT_NE(silent.Ended().find("no heartbeat for 0.2 s"), std::string::npos) << silent.Ended();
  EXPECT_EQ(closed.Ended(), "") << "its stream had closed already";
  for (const auto& w : cluster.Workers()) EXPECT_EQ(w.state(), "dead") << w.id();
}

// A dead worker stays listed (state dead) for dead_worker_retention_ms, then its record goes:
// a worker that comes back attaches under a new id, so a cluster whose workers come and go
// kept every id it ever gave out. A heartbeat under the forgotten id changes nothing, and an
// attached worker stays.
TEST(MembershipTest, ADeadWorkersRecordGoesAfterItsRetention) {
  ClusterOptions o;
  o.dead_worker_retention_ms = 1000;
  OwnCluster c(o);
  Cluster& cluster = c.cluster;
  FakeSession gone, stays;
  const std::string w1 = cluster.AddWorker(&gone, v1::Resources());
  const std::string w2 = cluster.AddWorker(&stays, v1::Resources());
  auto state_of = [&](const std::string& id) -> std::string {
    for (const auto& w : cluster.Workers()) {
      if (w.id() == id) return w.state();
    }
    return "";
  };
  const auto t0 = std::chrono::steady_clock::now();
  cluster.RemoveWorker(w1, "its attach stream closed");
  const std::string first = state_of(w1);
  if (first.empty()) {  // only if this process stalled past the retention
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(o.dead_worker_retention_ms));
  } else {
    EXPECT_EQ(first, "dead") << "listed dead within its retention";
  }
  testing::PollUntil([&] { return state_of(w1).empty(); }, std::chrono::seconds(20));
  EXPECT_EQ(state_of(w1), "") << "the dead worker's record outlived its retention";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(o.dead_worker_retention_ms));
  cluster.Heartbeat(w1, nullptr);
  EXPECT_EQ(state_of(w1), "") << "a heartbeat under a forgotten id brings nothing back";
  EXPECT_EQ(state_of(w2), "idle");
}

// Found in review: a worker whose messages wait in the service's queue (the coordinator slow
// to apply them: its heartbeats are not read while the queue is full) is not silent. It is
// counted out only once its backlog is applied and it stays silent. A worker with no backlog,
// silent alike, is the witness that the monitor ran its check meanwhile.
TEST(MembershipTest, AWorkerWhoseMessagesWaitOnTheCoordinatorIsNotCountedOut) {
  ClusterOptions o;
  o.worker_timeout_ms = 200;
  OwnCluster c(o);
  Cluster& cluster = c.cluster;
  FakeSession waiting, witness;
  waiting.backlogged = true;
  const std::string w1 = cluster.AddWorker(&waiting, v1::Resources());
  cluster.AddWorker(&witness, v1::Resources());
  auto wait_ended = [&](FakeSession& s) {
    testing::PollUntil([&] { return !s.Ended().empty(); }, std::chrono::seconds(10));
    return s.Ended();
  };
  ASSERT_NE(wait_ended(witness).find("no heartbeat for 0.2 s"), std::string::npos);
  // The witness was counted out in a round that saw both silent; one more round to be sure.
  FakeSession witness2;
  cluster.AddWorker(&witness2, v1::Resources());
  ASSERT_NE(wait_ended(witness2), "");
  EXPECT_EQ(waiting.Ended(), "") << "counted out while its messages waited on the coordinator";
  for (const auto& w : cluster.Workers()) {
    if (w.id() == w1) {
      EXPECT_EQ(w.state(), "idle");
    }
  }
  waiting.backlogged = false;
  EXPECT_NE(wait_ended(waiting).find("no heartbeat for 0.2 s"), std::string::npos) << "silent once its backlog is applied";
}

// Found in review: a job's watcher (a WatchJob stream) is called off the cluster's locks, and
// one whose stream ended meanwhile unsubscribed and was deleted while its call ran, or before
// it (the callbacks were copied, then called). Unsubscribe now waits for a call in flight,
// and no call comes after it returns.
TEST(WatchTest, UnsubscribeWaitsForItsCallbackInFlightAndNoneComesAfter) {
  OwnCluster c{ClusterOptions()};
  Cluster& cluster = c.cluster;
  Store* store = c.store.get();
  v1::Job j;
  j.set_name("w");
  j.set_state(v1::PENDING);
  j.set_spec_yaml("x");
  const std::string job = *store->CreateJob(j);
  std::promise<void> entered, release;
  std::shared_future<void> release_f = release.get_future().share();
  std::atomic<int> calls{0};
  std::atomic<bool> in_call{false};
  const int sub = cluster.Subscribe(job, [&] {
    if (calls++ == 0) {
      in_call = true;
      entered.set_value();
      release_f.wait();
      in_call = false;
    }
  });
  auto event = [&] {
    v1::JobEvent e;
    e.set_job_id(job);
    e.set_message("an event");
    return cluster.AddEvent(std::move(e));
  };
  absl::Status first;
  std::thread notifier([&] { first = event(); });
  entered.get_future().wait();
  std::promise<bool> returned;
  std::thread unsubscriber([&] {
    cluster.Unsubscribe(sub);
    returned.set_value(in_call.load());
  });
  auto r = returned.get_future();
  // The callback is blocked: Unsubscribe must not return while it runs.
  EXPECT_EQ(r.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout)
      << "Unsubscribe returned while its callback ran (its watcher could be deleted under it)";
  release.set_value();
  EXPECT_FALSE(r.get()) << "Unsubscribe returned before its callback ended";
  unsubscriber.join();
  notifier.join();
  ASSERT_TRUE(first.ok()) << first;
  ASSERT_TRUE(event().ok());
  EXPECT_EQ(calls.load(), 1) << "a callback after Unsubscribe returned";
}

TEST(StallTest, AStalledStepNamesTheRanksBehind) {
  ClusterOptions o;
  o.placement_grace_ms = 0;
  o.stall_ms = 300;
  OwnCluster c(o);
  Cluster& cluster = c.cluster;
  Store* store = c.store.get();
  FakeSession s1, s2;
  const std::string w1 = cluster.AddWorker(&s1, v1::Resources());
  const std::string w2 = cluster.AddWorker(&s2, v1::Resources());
  v1::Job j;
  j.set_name("s");
  j.set_state(v1::PENDING);
  j.set_world_size(2);
  j.set_spec_yaml("model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\ndata: {train: /x.bin}\n"
                  "train: {steps: 100, micro_batch: 1, lr: 1.0e-3}\nparallel: {dp: 2}\n");
  const std::string job = *store->CreateJob(j);
  cluster.JobSubmitted();
  ASSERT_EQ(store->GetJob(job)->generation(), 1);
  v1::StepUpdate u;
  u.set_job_id(job);
  u.set_generation(1);
  u.mutable_report()->set_step(3);
  u.mutable_report()->set_step_seconds(0.001);
  cluster.OnStep(w1, u);
  for (auto [w, rank, done] : {std::tuple{w1, 0, 40}, std::tuple{w2, 1, 37}}) {
    v1::Heartbeat hb;
    hb.set_job_id(job);
    hb.set_generation(1);
    v1::RankProgress* rp = hb.add_ranks();
    rp->set_rank(rank);
    rp->set_collectives_done(done);
    rp->set_step(3);
    cluster.Heartbeat(w, &hb);
  }
  testing::PollUntil([&] { return !store->GetJob(job)->stalled().empty(); }, std::chrono::seconds(10));
  const std::string stalled = store->GetJob(job)->stalled();
  EXPECT_NE(stalled.find("step 4 stalled"), std::string::npos) << stalled;
  EXPECT_NE(stalled.find("rank 1 (" + w2 + ") at collective #37"), std::string::npos) << stalled;
  EXPECT_NE(stalled.find("the others have completed collective #40"), std::string::npos) << stalled;
  EXPECT_EQ(stalled.find("rank 0"), std::string::npos) << "rank 0 is not behind: " << stalled;
  bool event = false;
  const std::vector<v1::JobEvent> events = *store->Events(job, 0, 1000);
  for (const auto& e : events) event = event || e.message() == stalled;
  EXPECT_TRUE(event) << "no event says: " << stalled;
  u.mutable_report()->set_step(4);
  cluster.OnStep(w1, u);
  EXPECT_TRUE(store->GetJob(job)->stalled().empty()) << "the next step clears it";
}

// Elastic dp in [1, 2]: placed at dp 1 on the one worker there is; a second worker attaches,
// and at the next committed checkpoint the job is placed again at dp 2 (not counted as a
// restart); a lost worker then places it again at dp 1 rather than waiting for a spare.
TEST_F(RestartTest, AnElasticJobShrinksAndGrowsWithTheWorkers) {
  FakeSession s1, s2;
  const std::string w1 = cluster_->AddWorker(&s1, v1::Resources());
  v1::Job j;
  j.set_name("e");
  j.set_state(v1::PENDING);
  j.set_world_size(2);
  j.set_spec_yaml("model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\ndata: {train: /x.bin}\n"
                  "train: {steps: 100, micro_batch: 1, global_batch: 2, lr: 1.0e-3}\nparallel: {dp: 2}\n"
                  "elastic: {min_dp: 1, max_dp: 2}\n");
  const std::string job = *store_->CreateJob(j);
  cluster_->JobSubmitted();
  const auto m0 = s1.Take();
  const v1::Assignment* a = Assigned(m0);
  ASSERT_NE(a, nullptr) << "an elastic job starts at the dp the idle workers allow";
  EXPECT_EQ(a->world_size(), 1);
  EXPECT_EQ(Job(job).world_size(), 1);
  EXPECT_EQ(a->resume_step(), 0) << "a fresh start";
  // The ranks read the spec as submitted, and the dp of their placement from its layout.
  EXPECT_EQ(a->spec_yaml(), j.spec_yaml()) << "never rewritten";
  EXPECT_EQ(a->layout().dp(), 1);
  auto placed = RanksSpec(*a);
  ASSERT_TRUE(placed.ok()) << placed.status() << ": a layout the spec admits";
  EXPECT_EQ(placed->grad_accum(), 2);
  Step(w1, job, 1, 4);

  const std::string w2 = cluster_->AddWorker(&s2, v1::Resources());
  EXPECT_EQ(Job(job).generation(), 1) << "it grows at a checkpoint, not at once";
  v1::CheckpointPart part;
  part.set_job_id(job);
  part.set_generation(1);
  part.set_rank(0);
  part.set_step(4);
  part.set_manifest_json("{}");
  cluster_->OnCheckpointPart(w1, part);
  cluster_->WaitForCommits();  // the commit runs off the caller's thread
  const v1::Job grown = Job(job);
  EXPECT_EQ(grown.generation(), 2);
  EXPECT_EQ(grown.world_size(), 2);
  EXPECT_EQ(grown.restarts(), 0) << "growing is not a restart";
  const auto m1 = s1.Take(), m2 = s2.Take();  // the assignments point into them
  const v1::Assignment* b1 = Assigned(m1);
  const v1::Assignment* b2 = Assigned(m2);
  ASSERT_TRUE(b1 != nullptr && b2 != nullptr);
  EXPECT_EQ(b1->world_size(), 2);
  // Both ranks start where the coordinator recorded the commit: step 4 of this job.
  for (const v1::Assignment* b : {b1, b2}) {
    EXPECT_EQ(b->resume_job_id(), job);
    EXPECT_EQ(b->resume_step(), 4);
    EXPECT_EQ(b->layout().dp(), 2);
    EXPECT_EQ(b->spec_yaml(), j.spec_yaml());
  }
  const std::vector<v1::JobEvent> events = *store_->Events(job, 0, 1000);
  bool said = false;
  for (const auto& e : events) said = said || e.message().find("growing from dp 1 to dp 2") != std::string::npos;
  EXPECT_TRUE(said);

  Step(w1, job, 2, 5);
  cluster_->RemoveWorker(w2, "heartbeat timeout");
  const v1::Job shrunk = Job(job);
  EXPECT_EQ(shrunk.generation(), 3);
  EXPECT_EQ(shrunk.world_size(), 1) << "placed again smaller rather than waiting";
  EXPECT_EQ(shrunk.restarts(), 1);
}

// Placement packs a job's ranks onto as few hosts as it can: with one idle worker on host a
// and two on host b, a DP=2 job goes to host b, ranks 0 and 1 side by side.
TEST_F(RestartTest, RanksArePackedOntoTheHostWithTheMostIdleWorkers) {
  FakeSession sa, sb1, sb2;
  v1::Resources a, b;
  a.set_host("a");
  b.set_host("b");
  cluster_->AddWorker(&sa, a);
  const std::string b1 = cluster_->AddWorker(&sb1, b);
  const std::string b2 = cluster_->AddWorker(&sb2, b);
  const std::string job = Submit(/*max_restarts=*/0, /*dp=*/2);
  const v1::Job placed = Job(job);
  ASSERT_EQ(placed.workers_size(), 2);
  EXPECT_EQ(placed.workers(0), b1);
  EXPECT_EQ(placed.workers(1), b2);
  EXPECT_EQ(Assigned(sa.Take()), nullptr);
}

// resources.device: a cuda-emulated job goes to the workers that offer cuda-emulated, never to
// an idle cpu worker, and waits while too few of them are idle. First come, first served
// holds within a device kind only: a cpu job submitted behind the waiting one is placed on
// the cpu workers at once.
TEST_F(RestartTest, AJobIsPlacedOnlyOnWorkersOfItsDeviceKind) {
  FakeSession cpu1, cpu2, emu1, emu2;
  v1::Resources cpu, emu;
  cpu.set_host("h");
  emu.set_host("h");
  emu.set_device_kind("cuda-emulated");
  emu.set_device_count(1);
  const std::string c1 = cluster_->AddWorker(&cpu1, cpu);
  const std::string c2 = cluster_->AddWorker(&cpu2, cpu);
  const std::string e1 = cluster_->AddWorker(&emu1, emu);
  const std::string job = SubmitTinyJob(*cluster_, *store_, "gpu-path", 2,
                                        "parallel: {dp: 2}\nresources: {device: cuda-emulated}\n");
  EXPECT_EQ(Job(job).state(), v1::PENDING) << "two cpu workers are idle, but one cuda-emulated";
  const std::string other = Submit(/*max_restarts=*/0, /*dp=*/2);
  const v1::Job on_cpu = Job(other);
  EXPECT_EQ(on_cpu.state(), v1::SCHEDULED) << "not held behind a job of another device kind";
  ASSERT_EQ(on_cpu.workers_size(), 2);
  EXPECT_EQ(on_cpu.workers(0), c1);
  EXPECT_EQ(on_cpu.workers(1), c2);
  EXPECT_EQ(Assigned(emu1.Take()), nullptr);
  const std::string e2 = cluster_->AddWorker(&emu2, emu);
  const v1::Job placed = Job(job);
  ASSERT_EQ(placed.state(), v1::SCHEDULED);
  ASSERT_EQ(placed.workers_size(), 2);
  EXPECT_EQ(placed.workers(0), e1);
  EXPECT_EQ(placed.workers(1), e2);
}

// A worker with several GPUs hosts one rank per GPU: a dp 4 job on a worker with 4
// cuda-emulated GPUs gets four assignments there, each with its local rank (the device
// ordinal) and local world 4; the worker stays busy until its last rank is done. A cuda
// worker that sees no GPU gets no rank, and a job bigger than one worker spans two, each
// worker's ranks on its devices 0, 1, ...
TEST_F(RestartTest, AGpuWorkerHostsOneRankPerGpuUntilItsLastRankIsDone) {
  FakeSession none, four, two;
  v1::Resources r;
  r.set_host("h");
  r.set_device_kind("cuda-emulated");
  r.set_device_count(0);
  const std::string w0 = cluster_->AddWorker(&none, r);
  r.set_device_count(4);
  const std::string w4 = cluster_->AddWorker(&four, r);
  const std::string dp4 = SubmitTinyJob(*cluster_, *store_, "dp4", 4, "parallel: {dp: 4}\nresources: {device: cuda-emulated}\n");
  EXPECT_EQ(Assigned(none.Take()), nullptr) << "a cuda worker without GPUs hosts no rank";
  const auto got = four.Take();
  std::vector<const v1::Assignment*> as;
  for (const auto& m : got) {
    if (m.has_assign()) as.push_back(&m.assign());
  }
  ASSERT_EQ(as.size(), 4u) << "one assignment per rank, all on the 4-GPU worker";
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(as[i]->rank(), i);
    EXPECT_EQ(as[i]->local_rank(), i) << "the local rank is the device ordinal";
    EXPECT_EQ(as[i]->local_world(), 4);
    EXPECT_EQ(as[i]->world_size(), 4);
  }
  v1::Job j = Job(dp4);
  ASSERT_EQ(j.workers_size(), 4);
  for (const auto& w : j.workers()) EXPECT_EQ(w, w4);
  auto state_of = [&](const std::string& id) {
    for (const auto& w : cluster_->Workers()) {
      if (w.id() == id) return w;
    }
    return v1::Worker();
  };
  EXPECT_EQ(state_of(w4).state(), "busy");
  EXPECT_EQ(state_of(w4).ranks_size(), 4);
  // A second job waits: the worker runs one job at a time.
  const std::string dp2 = SubmitTinyJob(*cluster_, *store_, "dp2", 2, "parallel: {dp: 2}\nresources: {device: cuda-emulated}\n");
  EXPECT_EQ(Job(dp2).state(), v1::PENDING);
  for (int rank = 0; rank < 4; ++rank) {
    v1::JobDone d;
    d.set_job_id(dp4);
    d.set_generation(j.generation());
    d.set_rank(rank);
    d.set_ok(true);
    cluster_->OnDone(w4, d);
    cluster_->WaitForCommits();
    if (rank < 3) {
      EXPECT_EQ(state_of(w4).state(), "busy") << "rank " << rank << " done, others still run";
      EXPECT_EQ(Job(dp2).state(), v1::PENDING);
    }
  }
  EXPECT_EQ(Job(dp4).state(), v1::SUCCEEDED);
  const v1::Job placed = Job(dp2);
  ASSERT_EQ(placed.state(), v1::SCHEDULED) << "its last rank done, the worker takes the next job";
  const auto next = four.Take();
  std::vector<int> locals;
  for (const auto& m : next) {
    if (m.has_assign()) locals.push_back(m.assign().local_rank());
  }
  EXPECT_EQ(locals, (std::vector<int>{0, 1}));
  // Too big for one worker: 6 ranks over the 4-GPU and a 2-GPU worker, each on its devices
  // from 0; cancelling frees both at once.
  cluster_->RemoveWorker(w0, "test");
  r.set_device_count(2);
  const std::string w2 = cluster_->AddWorker(&two, r);
  ASSERT_TRUE(cluster_->CancelJob(dp2).ok());
  EXPECT_EQ(state_of(w4).state(), "idle") << "a cancel frees the job's workers at once";
  four.Take();
  const std::string dp6 = SubmitTinyJob(*cluster_, *store_, "dp6", 6, "parallel: {dp: 6}\nresources: {device: cuda-emulated}\n");
  const v1::Job six = Job(dp6);
  ASSERT_EQ(six.state(), v1::SCHEDULED);
  ASSERT_EQ(six.workers_size(), 6);
  std::vector<std::pair<std::string, int>> where;
  for (auto* s : {&four, &two}) {
    for (const auto& m : s->Take()) {
      if (m.has_assign()) {
        where.emplace_back(six.workers(m.assign().rank()), m.assign().local_rank());
        EXPECT_EQ(m.assign().local_world(), s == &four ? 4 : 2);
      }
    }
  }
  std::sort(where.begin(), where.end());
  std::vector<std::pair<std::string, int>> want = {{w4, 0}, {w4, 1}, {w4, 2}, {w4, 3}, {w2, 0}, {w2, 1}};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(where, want);
}

// 3D placement: a DP=2 x TP=2 job needs two hosts with 2 idle workers each. Hosts a (3 idle),
// b (2) and c (1): one group on a, one on b; ranks 0-1 on a, 2-3 on b, and the assignments
// carry dp 2, tp 2. With 1 idle worker per host it waits rather than split a group.
TEST_F(RestartTest, ATensorParallelGroupIsPlacedOnOneHost) {
  FakeSession s[6];
  std::map<std::string, std::string> host_of;
  for (auto [i, h] : {std::pair{0, "a"}, std::pair{1, "a"}, std::pair{2, "a"}, std::pair{3, "b"}, std::pair{4, "b"},
                      std::pair{5, "c"}}) {
    v1::Resources r;
    r.set_host(h);
    host_of[cluster_->AddWorker(&s[i], r)] = h;
  }
  auto submit = [&](const std::string& name) {
    v1::Job j;
    j.set_name(name);
    j.set_state(v1::PENDING);
    j.set_world_size(4);
    j.set_spec_yaml("model: {n_layer: 2, n_head: 2, n_embd: 8, vocab_size: 16, seq_len: 8}\ndata: {train: /x.bin}\n"
                    "train: {steps: 100, micro_batch: 1, global_batch: 2, lr: 1.0e-3}\nparallel: {dp: 2, tp: 2}\n");
    const std::string id = *store_->CreateJob(j);
    cluster_->JobSubmitted();
    return id;
  };
  const std::string job = submit("tp");
  const v1::Job placed = Job(job);
  ASSERT_EQ(placed.workers_size(), 4);
  EXPECT_EQ(host_of[placed.workers(0)], host_of[placed.workers(1)]) << "tp group 0 on one host";
  EXPECT_EQ(host_of[placed.workers(2)], host_of[placed.workers(3)]) << "tp group 1 on one host";
  EXPECT_EQ(host_of[placed.workers(0)], "a");
  EXPECT_EQ(host_of[placed.workers(2)], "b");
  int assigned = 0;
  for (auto& f : s) {
    for (const auto& m : f.Take()) {
      if (!m.has_assign()) continue;
      ++assigned;
      EXPECT_EQ(m.assign().layout().dp(), 2);
      EXPECT_EQ(m.assign().layout().tp(), 2);
      EXPECT_EQ(m.assign().layout().pp(), 1);
      EXPECT_EQ(m.assign().world_size(), 4);
    }
  }
  EXPECT_EQ(assigned, 4);
  // Left idle: one worker on a, one on c: two workers, but no host with a whole group.
  const std::string next = submit("waits");
  EXPECT_EQ(Job(next).state(), v1::PENDING) << "a group is never split over hosts";
}

// Context parallelism is a factor of the world as dp, tp and pp are: a dp 2 x cp 2 job takes 4
// workers, and its assignments carry dp 2 (not world / (tp x pp) = 4), so each rank reads the
// spec's own dp.
TEST_F(RestartTest, AContextParallelJobIsAssignedItsDpNotTheWorld) {
  FakeSession s[4];
  for (auto& f : s) cluster_->AddWorker(&f, v1::Resources());
  v1::Job j;
  j.set_name("cp");
  j.set_state(v1::PENDING);
  j.set_world_size(4);
  j.set_spec_yaml("model: {n_layer: 2, n_head: 2, n_embd: 8, vocab_size: 16, seq_len: 8}\ndata: {train: /x.bin}\n"
                  "train: {steps: 100, micro_batch: 1, global_batch: 2, lr: 1.0e-3}\nparallel: {dp: 2, cp: 2}\n");
  const std::string job = *store_->CreateJob(j);
  cluster_->JobSubmitted();
  ASSERT_EQ(Job(job).workers_size(), 4);
  int assigned = 0;
  for (auto& f : s) {
    for (const auto& m : f.Take()) {
      if (!m.has_assign()) continue;
      ++assigned;
      EXPECT_EQ(m.assign().layout().dp(), 2);
      EXPECT_EQ(m.assign().layout().cp(), 2);
      EXPECT_EQ(m.assign().world_size(), 4);
    }
  }
  EXPECT_EQ(assigned, 4);
}

// SubmitJob parses a spec once, and the store shows the job to a scheduling pass only with that
// parse kept (Store::CreateJob's `created`): the pass that places it, at once on the idle
// worker, parses nothing. The ranks get the text as submitted, the layout in typed fields. A
// restarted coordinator parses the stored text once more, for all its later reads.
class SubmitOnceTest : public ::testing::Test, protected ServedCoordinator {
 protected:
  void SetUp() override {
    placement_grace_ms_ = 0;  // place at once, without a shard server
    StartServer(dir_.File("db"));
  }
  void TearDown() override { StopServer(); }
  double Parses() { return registry_.GetCounter("gantry_coordinator_spec_parses_total", "").Value(); }
  testing::TempDir dir_;
};

TEST_F(SubmitOnceTest, TheCoordinatorParsesAJobsSpecOnceAndTheRanksGetItAsSubmitted) {
  FakeSession worker;
  cluster_->AddWorker(&worker, v1::Resources());
  // As a user writes it: a comment, the keys in no particular order, defaults left out.
  const std::string text =
      "# the tiny model\ntrain: {lr: 1.0e-3, steps: 10, micro_batch: 2}\n"
      "model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 16}\ndata: {train: /nonexistent.bin}\n";
  v1::SubmitJobRequest req;
  req.set_spec_yaml(text);
  v1::SubmitJobResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->SubmitJob(&ctx, req, &resp).ok());
  std::vector<v1::CoordinatorMessage> got;
  ASSERT_TRUE(testing::PollUntil(
      [&] {
        for (auto& m : worker.Take()) got.push_back(std::move(m));
        return FakeSession::Assigned(got) != nullptr;
      },
      std::chrono::seconds(20)))
      << "placed on the idle worker";
  const v1::Assignment* a = FakeSession::Assigned(got);
  EXPECT_EQ(a->job_id(), resp.job_id());
  EXPECT_EQ(a->spec_yaml(), text) << "the ranks read the user's text, not a re-emitted one";
  EXPECT_EQ(a->layout().dp(), 1);
  EXPECT_EQ(a->layout().micro_batch(), 2);
  EXPECT_EQ(Parses(), 1.0) << "parsed at submit only: placement read the kept spec";
  // A refused spec is one parse, and no job.
  req.set_spec_yaml(text + "eval: {every: -1}\n");
  grpc::ClientContext bad_ctx;
  const grpc::Status bad = stub_->SubmitJob(&bad_ctx, req, &resp);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.error_message().find("field 'eval.every' must be >= 0"), std::string::npos) << bad.error_message();
  EXPECT_EQ(Parses(), 2.0);
  // A restarted coordinator reads the stored text once, whoever asks for the spec after.
  StopServer();
  StartServer(dir_.File("db"));
  v1::GetJobRequest gr;
  gr.set_job_id(a->job_id());
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext c;
    v1::Job job;
    ASSERT_TRUE(stub_->GetJob(&c, gr, &job).ok());
    EXPECT_FALSE(cluster_->SpecOf(job) == nullptr);
  }
  EXPECT_EQ(Parses(), 3.0);
}

TEST_F(RestartTest, AHigherPriorityJobIsPlacedFirstAndRestartingJobsLeadTheirPriority) {
  std::vector<v1::Job> jobs(4);
  jobs[0].set_id("j-000001"), jobs[0].set_state(v1::PENDING), jobs[0].set_priority(0);
  jobs[1].set_id("j-000002"), jobs[1].set_state(v1::PENDING), jobs[1].set_priority(5);
  jobs[2].set_id("j-000003"), jobs[2].set_state(v1::RESTARTING), jobs[2].set_priority(0);
  jobs[3].set_id("j-000004"), jobs[3].set_state(v1::RUNNING), jobs[3].set_priority(9);
  const auto q = placement::QueueOrder(jobs);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0].id(), "j-000002");
  EXPECT_EQ(q[1].id(), "j-000003");
  EXPECT_EQ(q[2].id(), "j-000001");
}

// The shard server's side: pushes carry (job, generation, step).
TEST(ParamServerRestartTest, StalePushesAndReplayedStepsAreRefused) {
  metrics::Registry registry;
  shardserver::ParamService svc(&registry);
  grpc::ServerBuilder b;
  int port = 0;
  b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  b.RegisterService(&svc);
  auto server = b.BuildAndStart();
  ASSERT_GT(port, 0);
  auto stub = v1::ParamServer::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  const int n = 64;
  auto init = [&](int64_t gen) {
    grpc::ClientContext ctx;
    v1::InitRangeRequest r;
    r.set_job_id("j-000001");
    r.set_generation(gen);
    r.mutable_range()->set_begin(0);
    r.mutable_range()->set_end(n);
    r.set_beta1(0.9), r.set_beta2(0.95), r.set_eps(1e-8);
    v1::InitRangeResponse resp;
    return stub->InitRange(&ctx, r, &resp);
  };
  auto push = [&](int64_t gen, int64_t step, v1::PushAck* ack) {
    grpc::ClientContext ctx;
    v1::GradientChunk g;
    g.set_job_id("j-000001");
    g.set_generation(gen);
    g.set_step(step);
    g.set_lr(1e-2);
    g.set_offset(0);
    std::vector<float> grad(n, 0.5f);
    g.set_data(grad.data(), grad.size() * sizeof(float));
    return stub->PushGradients(&ctx, g, ack);
  };
  auto params = [&](int64_t gen) {
    grpc::ClientContext ctx;
    v1::ReadParamsRequest r;
    r.set_job_id("j-000001");
    r.set_generation(gen);
    r.set_offset(0);
    r.set_count(n);
    v1::ParamsChunk c;
    EXPECT_TRUE(stub->ReadParams(&ctx, r, &c).ok());
    std::vector<float> v(n);
    if (c.data().size() == n * sizeof(float)) std::memcpy(v.data(), c.data().data(), c.data().size());
    return std::make_pair(v, c.version());
  };
  ASSERT_TRUE(init(1).ok());
  v1::PushAck ack;
  ASSERT_TRUE(push(1, 1, &ack).ok());
  EXPECT_TRUE(ack.applied());
  // The job restarts at generation 2 from a checkpoint of step 0.
  ASSERT_TRUE(init(2).ok());
  const auto before = params(2);
  EXPECT_EQ(before.second, 0);
  auto stale = push(1, 1, &ack);
  EXPECT_EQ(stale.error_code(), grpc::FAILED_PRECONDITION) << stale.error_message();
  EXPECT_NE(stale.error_message().find("not 1"), std::string::npos) << stale.error_message();
  EXPECT_EQ(params(2), before) << "the stale push changed nothing";
  ASSERT_TRUE(push(2, 1, &ack).ok());
  EXPECT_TRUE(ack.applied());
  const auto once = params(2);
  EXPECT_EQ(once.second, 1);
  auto again = push(2, 1, &ack);
  EXPECT_EQ(again.error_code(), grpc::FAILED_PRECONDITION) << "step 1 is not applied twice";
  EXPECT_EQ(params(2), once);
  server->Shutdown();
}

// The data port's own tests (connections, deadlines, back-pressure, stop) are in
// tests/shardserver/param_data_port_test.cc.

// Found by tests/fuzz/param_wire_fuzz: InitRange allocated whatever range it was given, and
// [0, 2^62) threw std::bad_alloc out of the gRPC handler (the process ends). A range past the
// machine's memory is now RESOURCE_EXHAUSTED, naming the job and the sizes.
TEST(ParamServerDataPortTest, ARangePastTheMachinesMemoryIsRefused) {
  metrics::Registry registry;
  shardserver::ParamService svc(&registry);
  grpc::ServerBuilder b;
  b.RegisterService(&svc);
  auto server = b.BuildAndStart();
  auto stub = v1::ParamServer::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  for (int64_t end : {int64_t{1} << 62, INT64_MAX}) {
    grpc::ClientContext ctx;
    v1::InitRangeRequest r;
    r.set_job_id("j-000001");
    r.set_generation(1);
    r.mutable_range()->set_begin(0);
    r.mutable_range()->set_end(end);
    v1::InitRangeResponse resp;
    const grpc::Status s = stub->InitRange(&ctx, r, &resp);
    EXPECT_EQ(s.error_code(), grpc::RESOURCE_EXHAUSTED) << s.error_message();
    EXPECT_NE(s.error_message().find("j-000001"), std::string::npos) << s.error_message();
  }
  // An ordinary range is still taken.
  grpc::ClientContext ctx;
  v1::InitRangeRequest r;
  r.set_job_id("j-000001");
  r.set_generation(1);
  r.mutable_range()->set_end(1024);
  v1::InitRangeResponse resp;
  EXPECT_TRUE(stub->InitRange(&ctx, r, &resp).ok());
  server->Shutdown();
}

}  // namespace
}  // namespace gantry::coordinator
