// The scheduler on its own (coordinator/scheduler.h), with a recording Host in place of the
// cluster: passes at explicit times, placements sent to the members, the lookup of stored
// checkpoints it asks for, and a job whose resume point fails handed back as FAILED.
#include "coordinator/scheduler.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "jobspec/auto_layout.h"
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
  std::string AddCpuWorker(FakeSession* s, const std::string& host, int64_t memory = 0) {
    v1::Resources r;
    r.set_host(host);
    r.set_device_kind("cpu");
    r.set_device_count(1);
    r.set_memory_bytes(memory);
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

// parallel: auto (coordinator/auto_placer.h): the workers and the layout the cost model ranks
// first for them, the layout and its prediction in the job's events, chosen again when the
// job is placed again on fewer workers; a model no layout fits fails naming the memory.
constexpr char kAutoJob[] =
    "model: {n_layer: 4, n_head: 4, n_embd: 256, vocab_size: 512, seq_len: 128}\n"
    "data: {train: /nonexistent.bin}\ntrain: {steps: 100, global_batch: 16, lr: 1.0e-3}\n"
    "parallel: auto\n";

std::string QueueSpec(Store& store, const std::string& name, const std::string& yaml) {
  v1::Job j;
  j.set_name(name);
  j.set_state(v1::PENDING);
  j.set_world_size(1);
  j.set_spec_yaml(yaml);
  return *store.CreateJob(j);
}

// The layout the cost model ranks first for `world` cpu workers of `memory` bytes on one host.
jobspec::PlanInput FirstRanked(int world, double memory) {
  std::string why;
  jobspec::ClusterSpec cluster = jobspec::DefaultCluster("cpu", "", &why);
  cluster.device.memory = memory;
  cluster.gpus_per_node = world;
  auto spec = jobspec::ParseJobSpec(kAutoJob);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto ranked = jobspec::RankLayouts(jobspec::PlanOfSpec(*spec), cluster, world, 16, 1);
  EXPECT_TRUE(ranked.ok()) << ranked.status();
  return ranked.ok() ? ranked->front().in : jobspec::PlanInput{};
}

TEST_F(SchedulerTest, AnAutoJobGetsTheLayoutTheCostModelRanksFirstAndItsEvent) {
  std::vector<std::unique_ptr<FakeSession>> sessions;
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    sessions.push_back(std::make_unique<FakeSession>());
    ids.push_back(AddCpuWorker(sessions.back().get(), "h1", 8'000'000'000));
  }
  const std::string id = QueueSpec(*store_, "auto", kAutoJob);
  scheduler_.Pass(1000);
  v1::Job job = *store_->GetJob(id);
  ASSERT_EQ(job.state(), v1::SCHEDULED) << job.reason();
  ASSERT_EQ(job.workers_size(), 4) << "every idle worker: a layout of 4 fits";
  const jobspec::PlanInput best = FirstRanked(4, 8e9);
  const auto sent = sessions[0]->Take();
  for (int i = 1; i < 4; ++i) EXPECT_NE(FakeSession::Assigned(sessions[i]->Take()), nullptr);
  const v1::Assignment* a = FakeSession::Assigned(sent);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->world_size(), 4);
  EXPECT_EQ(a->dp(), best.dp);
  EXPECT_EQ(a->tp(), best.tp);
  EXPECT_EQ(a->pp(), best.pp);
  auto placed = jobspec::ParseJobSpec(a->spec_yaml());  // what the ranks read: the layout, auto gone
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_FALSE(placed->auto_layout());
  EXPECT_EQ(placed->parallel.dp, best.dp);
  EXPECT_EQ(placed->parallel.zero_stage, best.zero);
  EXPECT_EQ(placed->train.micro_batch, best.micro_batch);
  EXPECT_EQ(placed->recompute(), best.recompute);
  EXPECT_EQ(placed->train.global_batch, 16);
  // The event: the layout and its prediction, before the placement's; the record keeps it.
  auto events = store_->Events(id, 0, 0);
  ASSERT_TRUE(events.ok()) << events.status();
  std::string layout_event;
  for (const auto& e : *events) {
    if (absl::StartsWith(e.message(), "parallel: auto on 4 cpu workers")) layout_event = e.message();
  }
  ASSERT_FALSE(layout_event.empty());
  for (const std::string& part : {absl::StrCat("dp ", best.dp, " x tp ", best.tp, " x pp ", best.pp, ", ZeRO ", best.zero),
                                  std::string("no --cluster: the generic cpu profile"), std::string("predicted step"),
                                  std::string("tokens/s"), std::string("MFU"), std::string("GB per worker of 8 GB")}) {
    EXPECT_NE(layout_event.find(part), std::string::npos) << part << " in: " << layout_event;
  }
  EXPECT_EQ(job.layout(), layout_event);
  // Placed again on two workers (two lost, the job restarting): the layout is chosen again,
  // for two.
  for (int i = 0; i < 4; ++i) {
    Member* m = members_.Find(ids[i]);
    if (i < 2) {
      members_.MarkDead(*m, 1000);
    } else {
      m->Free();
    }
  }
  job.set_state(v1::RESTARTING);
  ASSERT_TRUE(store_->PutJob(job).ok());
  scheduler_.Pass(2000);
  job = *store_->GetJob(id);
  ASSERT_EQ(job.state(), v1::SCHEDULED) << job.reason();
  EXPECT_EQ(job.workers_size(), 2);
  const jobspec::PlanInput two = FirstRanked(2, 8e9);
  const auto sent_again = sessions[2]->Take();
  const v1::Assignment* b = FakeSession::Assigned(sent_again);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->generation(), 2);
  EXPECT_EQ(b->dp(), two.dp);
  EXPECT_EQ(b->tp(), two.tp);
  auto again = jobspec::ParseJobSpec(b->spec_yaml());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->train.micro_batch, two.micro_batch);
  EXPECT_NE(job.layout().find("parallel: auto on 2 cpu workers"), std::string::npos) << job.layout();
}

TEST_F(SchedulerTest, AnAutoJobThatFitsNoLayoutFailsNamingTheMemory) {
  FakeSession s1, s2;
  for (FakeSession* s : {&s1, &s2}) AddCpuWorker(s, "h1", 2'000'000);  // 2 MB
  const std::string id = QueueSpec(*store_, "too-big", std::string(kAutoJob) + "resources: {workers: 2}\n");
  scheduler_.Pass(1000);
  const v1::Job job = *store_->GetJob(id);
  ASSERT_EQ(job.state(), v1::FAILED);
  EXPECT_NE(job.reason().find("parallel: auto: no layout fits the cpu workers"), std::string::npos) << job.reason();
  EXPECT_NE(job.reason().find("fits 90% of 0.00 GB each"), std::string::npos) << job.reason();
  EXPECT_NE(job.reason().find("the least any needs is"), std::string::npos) << job.reason();
  EXPECT_EQ(FakeSession::Assigned(s1.Take()), nullptr);
}

TEST_F(SchedulerTest, AnAutoJobThatFitsOnlyAllTheAttachedWorkersWaitsForThem) {
  // A model that needs 4 workers' ZeRO 3 sharding; one of the four is busy with another job.
  std::vector<std::unique_ptr<FakeSession>> sessions;
  std::vector<Member*> members;
  auto spec = jobspec::ParseJobSpec(kAutoJob);
  ASSERT_TRUE(spec.ok());
  // The memory: between what 4 and what 3 workers need at best.
  std::string why;
  jobspec::ClusterSpec cluster = jobspec::DefaultCluster("cpu", "", &why);
  auto least = [&](int world) {
    cluster.device.memory = 1;
    cluster.gpus_per_node = 1;  // tp 1: layouts the placer considers on 3 idle slots of a host and on 4
    const std::string m(jobspec::ChooseLayouts(*spec, cluster, world, 1).status().message());
    EXPECT_NE(m.find("the least any needs is "), std::string::npos) << m;
    return std::stod(m.substr(m.find("the least any needs is ") + 23)) * 1e9 / 0.9;
  };
  // (3 workers: no layout divides the model and the batch.)
  const double need4 = least(4), need2 = least(2), need1 = least(1);
  ASSERT_LT(need4 * 1.02, std::min(need2, need1) * 0.98) << "the test needs 4 workers to shard more";
  for (int i = 0; i < 4; ++i) {
    sessions.push_back(std::make_unique<FakeSession>());
    members.push_back(members_.Find(AddCpuWorker(sessions.back().get(), "h1", static_cast<int64_t>(need4 * 1.02))));
  }
  members[3]->Assign("j-other", 1, 0);
  const std::string id = QueueSpec(*store_, "waits", kAutoJob);
  scheduler_.Pass(1000);
  EXPECT_EQ(store_->GetJob(id)->state(), v1::PENDING);
  EXPECT_NE(scheduler_.AutoWaitReason(id).find("waiting for more idle cpu workers"), std::string::npos)
      << scheduler_.AutoWaitReason(id);
  EXPECT_NE(scheduler_.AutoWaitReason(id).find("on all 4 attached slots a layout fits"), std::string::npos)
      << scheduler_.AutoWaitReason(id);
  members[3]->Free();
  scheduler_.Pass(2000);
  const v1::Job job = *store_->GetJob(id);
  EXPECT_EQ(job.state(), v1::SCHEDULED) << job.reason();
  EXPECT_EQ(job.workers_size(), 4);
  EXPECT_EQ(scheduler_.AutoWaitReason(id), "");
}

}  // namespace
}  // namespace gantry::coordinator
