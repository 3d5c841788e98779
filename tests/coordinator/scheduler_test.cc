// The scheduler on its own (coordinator/scheduler.h), with a recording Host in place of the
// cluster: passes at explicit times, placements sent to the members, the lookup of stored
// checkpoints it asks for, and a job whose resume point fails handed back as FAILED.
#include "coordinator/scheduler.h"

#include <gtest/gtest.h>

#include "tests/coordinator/cluster_test_util.h"
#include "tests/test_util.h"

namespace gantry::coordinator {
namespace {

class RecordingHost : public Scheduler::Host {
 public:
  explicit RecordingHost(Store* store) : store_(store) {}
  absl::Status Transition(v1::Job& job, v1::JobState to, const std::string& message) override {
    transitions.push_back({job.id(), to});
    job.set_state(to);
    return store_->PutJob(job);
  }
  void ListStoredSteps(const std::string& job_id, int64_t generation, std::vector<std::string> servers,
                       std::vector<std::string> jobs) override {
    lookups.push_back({job_id, generation, servers, jobs});
  }
  struct Lookup {
    std::string job_id;
    int64_t generation;
    std::vector<std::string> servers, jobs;
  };
  std::vector<std::pair<std::string, v1::JobState>> transitions;
  std::vector<Lookup> lookups;

 private:
  Store* store_;
};

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest()
      : store_(*Store::Open(dir_.File("db"))),
        members_(MembershipOptions{}),
        specs_(store_.get(), &registry_),
        host_(store_.get()),
        scheduler_(store_.get(), &members_, &specs_, &watchers_, &registry_, &host_,
                   Scheduler::Options{/*placement_grace_ms=*/100, /*checkpoint_server_wait_ms=*/1000}, /*started_ms=*/0) {}

  std::string Queue(const std::string& name, int world, const std::string& more_yaml = "", int global_batch = 0) {
    v1::Job j;
    j.set_name(name);
    j.set_state(v1::PENDING);
    j.set_world_size(world);
    j.set_spec_yaml(absl::StrCat("model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\n",
                                 "data: {train: /nonexistent.bin}\n", "train: {steps: 100, micro_batch: 1, ",
                                 global_batch ? absl::StrCat("global_batch: ", global_batch, ", ") : "", "lr: 1.0e-3}\n",
                                 "parallel: {dp: ", world, "}\n", more_yaml));
    return *store_->CreateJob(j);
  }
  std::string AddCpuWorker(FakeSession* s, const std::string& host) {
    v1::Resources r;
    r.set_host(host);
    r.set_device_kind("cpu");
    r.set_device_count(1);
    return members_.Add(s, r, 0).info.id();
  }
  void AddShardServer(int64_t now) {
    v1::RegisterShardServerRequest r;
    r.set_address("127.0.0.1:1");
    members_.RegisterShardServer(r, now);
  }

  testing::TempDir dir_;
  metrics::Registry registry_;
  std::unique_ptr<Store> store_;
  Membership members_;
  SpecCache specs_;
  Watchers watchers_;
  RecordingHost host_;
  Scheduler scheduler_;
};

TEST_F(SchedulerTest, APassPlacesAllRanksOrNoneFirstComeFirstServed) {
  FakeSession a, b;
  AddCpuWorker(&a, "h1");
  AddCpuWorker(&b, "h2");
  const std::string big = Queue("big", 3);    // more ranks than workers: it waits...
  const std::string small = Queue("small", 1);  // ...and holds back the later job of its kind
  scheduler_.Pass(50);  // within the grace and no shard server: nothing is placed yet
  EXPECT_EQ(store_->GetJob(big)->state(), v1::PENDING);
  scheduler_.Pass(150);
  EXPECT_EQ(store_->GetJob(big)->state(), v1::PENDING);
  EXPECT_EQ(store_->GetJob(small)->state(), v1::PENDING);
  EXPECT_EQ(FakeSession::Assigned(a.Take()), nullptr);
  // The big job is cancelled: the small one is placed on one worker, at generation 1.
  v1::Job j = *store_->GetJob(big);
  ASSERT_TRUE(host_.Transition(j, v1::CANCELLED, "").ok());
  scheduler_.Pass(200);
  const v1::Job placed = *store_->GetJob(small);
  EXPECT_EQ(placed.state(), v1::SCHEDULED);
  EXPECT_EQ(placed.generation(), 1);
  ASSERT_EQ(placed.workers_size(), 1);
  const auto ma = a.Take(), mb = b.Take();
  const v1::Assignment* got = FakeSession::Assigned(ma) ? FakeSession::Assigned(ma) : FakeSession::Assigned(mb);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->job_id(), small);
  EXPECT_EQ(got->world_size(), 1);
  EXPECT_EQ(members_.Count("cpu").idle, 1);
}

TEST_F(SchedulerTest, AResumeFromAJobWithoutACheckpointAsksTheServersThenFails) {
  FakeSession a;
  AddCpuWorker(&a, "h1");
  AddShardServer(0);
  const std::string id = Queue("resumer", 1, "checkpoint: {resume_from: nosuchjob}\n");
  EXPECT_TRUE(scheduler_.Due(100));  // the start's grace is over
  scheduler_.Pass(10);
  // What the shard servers hold is asked for first (its own job and the one it resumes from).
  ASSERT_EQ(host_.lookups.size(), 1u);
  EXPECT_EQ(host_.lookups[0].job_id, id);
  EXPECT_EQ(host_.lookups[0].jobs, (std::vector<std::string>{id, "nosuchjob"}));
  EXPECT_EQ(store_->GetJob(id)->state(), v1::PENDING);
  // A server could not be listed: nothing is concluded, and a pass is due a second later.
  scheduler_.StoredStepsListed(id, 0, {}, {"127.0.0.1:1: unavailable"});
  EXPECT_FALSE(scheduler_.Due(10 + 999));
  EXPECT_TRUE(scheduler_.Due(10 + 1000));
  AddShardServer(1000);
  scheduler_.Pass(1010);
  ASSERT_EQ(host_.lookups.size(), 2u);
  // The servers hold nothing of either job: the job fails, through the host, and names why.
  scheduler_.StoredStepsListed(id, 0, {0, 0}, {});
  scheduler_.Pass(1020);
  ASSERT_EQ(host_.transitions.size(), 1u);
  EXPECT_EQ(host_.transitions[0], (std::pair<std::string, v1::JobState>{id, v1::FAILED}));
  EXPECT_NE(store_->GetJob(id)->reason().find("nosuchjob has no committed checkpoint"), std::string::npos)
      << store_->GetJob(id)->reason();
  EXPECT_EQ(FakeSession::Assigned(a.Take()), nullptr);
}

TEST_F(SchedulerTest, AnElasticJobGrowsOnlyWhenNoJobOfItsKindWaits) {
  FakeSession a, b, c;
  AddCpuWorker(&a, "h1");
  const std::string id = Queue("elastic", 1, "elastic: {min_dp: 1, max_dp: 4}\n", /*global_batch=*/12);
  scheduler_.Pass(200);
  v1::Job job = *store_->GetJob(id);
  ASSERT_EQ(job.state(), v1::SCHEDULED);
  const auto spec = specs_.Of(job);
  ASSERT_TRUE(spec);
  EXPECT_EQ(scheduler_.GrowTarget(job, *spec), 0);  // no idle worker
  AddCpuWorker(&b, "h2");
  AddCpuWorker(&c, "h3");
  EXPECT_EQ(scheduler_.GrowTarget(job, *spec), 3);
  Queue("waiting", 4);  // a queued job of its kind comes first
  EXPECT_EQ(scheduler_.GrowTarget(job, *spec), 0);
}

}  // namespace
}  // namespace gantry::coordinator
