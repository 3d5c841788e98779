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
  absl::Status Preempt(v1::Job& victim, const v1::Job& by, const std::string& reason) override {
    preemptions.push_back({victim.id(), by.id(), reason});
    victim.mutable_preemption()->set_by_job(by.id());  // as the cluster's durable note
    victim.mutable_preemption()->set_generation(victim.generation());
    return store_->PutJob(victim);
  }
  struct Preemption {
    std::string victim, by, reason;
  };
  std::vector<Preemption> preemptions;
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

TEST_F(SchedulerTest, AJobThatCannotBePlacedPreemptsLowerPriorityRunningJobsOnce) {
  FakeSession a, b, c;
  AddCpuWorker(&a, "h1");
  AddCpuWorker(&b, "h2");
  AddCpuWorker(&c, "h3");
  // Three running jobs, one on each worker: priority 5 (not below the newcomer's), priority 0
  // not preemptible, and priority 0.
  // (The record's priority is SubmitJob's copy of the spec's.)
  auto queue = [&](const std::string& name, int world, int priority, const std::string& more = "") {
    const std::string id = Queue(name, world, absl::StrCat("scheduling: {priority: ", priority, more, "}\n"));
    v1::Job j = *store_->GetJob(id);
    j.set_priority(priority);
    EXPECT_TRUE(store_->PutJob(j).ok());
    return id;
  };
  const std::string same = queue("same", 1, 5);
  const std::string pinned = queue("pinned", 1, 0, ", preemptible: false");
  scheduler_.Pass(150);
  const std::string low = queue("low", 1, 0);
  scheduler_.Pass(160);
  for (const std::string& id : {same, pinned, low}) {
    v1::Job j = *store_->GetJob(id);
    ASSERT_EQ(j.state(), v1::SCHEDULED) << id;
    j.set_state(v1::RUNNING);
    ASSERT_TRUE(store_->PutJob(j).ok());
  }
  // Priority 5, one worker wanted, none idle: only "low" may give way.
  const std::string urgent = queue("urgent", 1, 5);
  scheduler_.Pass(200);
  EXPECT_EQ(store_->GetJob(urgent)->state(), v1::PENDING);
  ASSERT_EQ(host_.preemptions.size(), 1u);
  EXPECT_EQ(host_.preemptions[0].victim, low);
  EXPECT_EQ(host_.preemptions[0].by, urgent);
  EXPECT_EQ(host_.preemptions[0].reason, "job " + urgent + " (priority 5 over 0) needs 1 cpu slot and 0 are idle");
  // The next pass counts the slot being freed: no second victim.
  scheduler_.Pass(300);
  EXPECT_EQ(host_.preemptions.size(), 1u) << "a preemption under way is not repeated";
  // The job that cannot be preempted and the one of equal priority stay; a job wanting more
  // than every lower-priority job frees preempts nothing.
  const std::string huge = queue("huge", 3, 9);
  scheduler_.Pass(400);
  EXPECT_EQ(host_.preemptions.size(), 1u) << "low (going) and same free 2 of 3; pinned may not be preempted";
  EXPECT_EQ(store_->GetJob(huge)->state(), v1::PENDING);
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
  EXPECT_EQ(a->layout().dp(), best.dp);
  EXPECT_EQ(a->layout().tp(), best.tp);
  EXPECT_EQ(a->layout().pp(), best.pp);
  EXPECT_EQ(a->spec_yaml(), kAutoJob) << "as submitted: the layout travels in typed fields";
  auto placed = RanksSpec(*a);  // what the ranks run: the layout, auto gone
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
  EXPECT_EQ(b->layout().dp(), two.dp);
  EXPECT_EQ(b->layout().tp(), two.tp);
  auto again = RanksSpec(*b);
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

// Team quotas (coordinator/quota.h): one pass over queued jobs of teams with quotas, some
// jobs already running, and what each queued job is after it: placed, waiting for workers
// (""), or held with its reason. Every case runs one pass at a time past the start's grace.
struct QuotaJob {
  std::string name, team;
  int world = 1;
  int priority = 16;
  bool running = false;  // already placed (RUNNING): counts as its team's use
  std::string device = "cpu";
  std::string expect{};  // queued jobs: "placed", "" (waits for workers) or the hold's reason
  int borrowed = 0;     // placed jobs: the slots beyond its team's quota (borrowed_slots)
};
struct QuotaCase {
  std::string name;
  TeamQuotas quotas;
  int cpu_workers = 0;
  std::vector<QuotaJob> jobs;
};

void PrintTo(const QuotaCase& c, std::ostream* os) { *os << c.name; }

TeamQuota Quota(const std::string& team, std::map<std::string, int64_t> nominal, int64_t max_running_jobs = 0,
                const std::string& cohort = "") {
  TeamQuota q;
  q.team = team;
  q.nominal = std::move(nominal);
  q.max_running_jobs = max_running_jobs;
  q.cohort = cohort;
  return q;
}

// A quota with per-cohort limits (the principals file's borrowing_limit, lending_limit).
TeamQuota Limits(TeamQuota q, std::map<std::string, int64_t> borrowing, std::map<std::string, int64_t> lending = {}) {
  q.borrowing_limit = std::move(borrowing);
  q.lending_limit = std::move(lending);
  return q;
}

TeamQuotas Quotas(std::vector<TeamQuota> teams) {
  TeamQuotas out;
  for (auto& t : teams) out[t.team] = t;
  return out;
}

class SchedulerQuotaTest : public SchedulerTest, public ::testing::WithParamInterface<QuotaCase> {
 protected:
  std::string QueueJob(const QuotaJob& q, const std::string& more_yaml = "") {
    v1::Job j;
    j.set_name(q.name);
    j.set_team(q.team);
    j.set_owner(q.name);
    j.set_priority(q.priority);
    j.set_state(q.running ? v1::RUNNING : v1::PENDING);
    j.set_world_size(q.world);
    j.set_spec_yaml(absl::StrCat("model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\n",
                                 "data: {train: /nonexistent.bin}\ntrain: {steps: 100, micro_batch: 1, ",
                                 more_yaml.empty() ? "" : "global_batch: 12, ", "lr: 1.0e-3}\n",
                                 "parallel: {dp: ", q.world, "}\nresources: {device: ", q.device, "}\n", more_yaml));
    const std::string id = *store_->CreateJob(j);
    if (q.running) {
      v1::Job placed = *store_->GetJob(id);
      EXPECT_TRUE(specs_.Of(placed)) << q.name;  // its device kind known, as for a job placed by this coordinator
    }
    return id;
  }
  std::unique_ptr<Scheduler> WithQuotas(std::function<std::shared_ptr<const TeamQuotas>()> quotas) {
    Scheduler::Options o{/*placement_grace_ms=*/100, /*checkpoint_server_wait_ms=*/1000};
    o.quotas = std::move(quotas);
    return std::make_unique<Scheduler>(store_.get(), &members_, &specs_, &watchers_, &registry_, &host_, o, 0);
  }
  std::vector<std::unique_ptr<FakeSession>> sessions_;
};

std::vector<QuotaCase> QuotaCases() {
  return {
      {"a team at its quota waits; another team's job behind it goes",
       Quotas({Quota("vision", {{"cpu", 2}})}),
       4,
       {{"v1", "vision", 2, 16, false, "cpu", "placed"},
        {"v2", "vision", 1, 16, false, "cpu", "team vision at its quota: 2 of 2 cpu slots"},
        {"n1", "nlp", 1, 16, false, "cpu", "placed"}}},
      {"a team at its cap of running jobs waits",
       Quotas({Quota("vision", {}, 1)}),
       2,
       {{"r", "vision", 1, 16, true},
        {"v1", "vision", 1, 16, false, "cpu", "team vision at its cap of 1 running job"},
        {"n1", "nlp", 1, 16, false, "cpu", "placed"}}},
      {"GPUs: the issue's example, and a cap of several jobs",
       Quotas({Quota("vision", {{"cuda", 16}}), Quota("nlp", {}, 3)}),
       0,
       {{"r", "vision", 16, 16, true, "cuda"},
        {"v1", "vision", 8, 16, false, "cuda", "team vision at its quota: 16 of 16 GPUs"},
        {"n1", "nlp", 1, 16, true, "cuda"},
        {"n2", "nlp", 1, 16, true, "cuda"},
        {"n3", "nlp", 1, 16, true, "cuda"},
        {"n4", "nlp", 1, 16, false, "cuda", "team nlp at its cap of 3 running jobs"}}},
      {"a job that would pass its team's quota waits, and the team's jobs behind it",
       Quotas({Quota("vision", {{"cpu", 3}})}),
       4,
       {{"r", "vision", 2, 16, true},
        {"v1", "vision", 2, 16, false, "cpu", "team vision near its quota: 2 of 3 cpu slots in use, and this job needs 2"},
        {"v2", "vision", 1, 16, false, "cpu", "team vision near its quota: 2 of 3 cpu slots in use, and this job needs 2"}}},
      {"a job larger than its team's quota says so",
       Quotas({Quota("vision", {{"cpu", 2}})}),
       4,
       {{"v1", "vision", 3, 16, false, "cpu", "team vision's quota of 2 cpu slots is less than the 3 this job needs"}}},
      {"a quota of 0 closes the kind to the team",
       Quotas({Quota("vision", {{"cpu", 0}, {"cuda", 8}})}),
       1,
       {{"v1", "vision", 1, 16, false, "cpu", "team vision's quota of 0 cpu slots is less than the 1 this job needs"}}},
      {"within a priority the team of the lower share goes first",
       Quotas({Quota("vision", {{"cpu", 4}}), Quota("nlp", {{"cpu", 4}})}),
       1,
       {{"r", "vision", 2, 16, true}, {"v1", "vision", 1, 16, false, "cpu", ""}, {"n1", "nlp", 1, 16, false, "cpu", "placed"}}},
      {"priority comes before share",
       Quotas({Quota("vision", {{"cpu", 4}}), Quota("nlp", {{"cpu", 4}})}),
       1,
       {{"r", "vision", 2, 16, true},
        {"v1", "vision", 1, 17, false, "cpu", "placed"},
        {"n1", "nlp", 1, 16, false, "cpu", ""}}},
      {"equal shares: age",
       Quotas({Quota("vision", {{"cpu", 4}}), Quota("nlp", {{"cpu", 4}})}),
       1,
       {{"v1", "vision", 1, 16, false, "cpu", "placed"}, {"n1", "nlp", 1, 16, false, "cpu", ""}}},
      {"the share is the dominant one, over every kind of the quota",
       Quotas({Quota("vision", {{"cpu", 4}, {"cuda", 8}}), Quota("nlp", {{"cpu", 4}})}),
       1,
       {{"rv", "vision", 6, 16, true, "cuda"},  // 6 of 8 GPUs: 0.75, over its 0 of 4 cpu slots
        {"rn", "nlp", 2, 16, true},             // 2 of 4 cpu slots: 0.5
        {"v1", "vision", 1, 16, false, "cpu", ""},
        {"n1", "nlp", 1, 16, false, "cpu", "placed"}}},
      {"shares change within the pass as jobs are placed",
       Quotas({Quota("vision", {{"cpu", 4}}), Quota("nlp", {{"cpu", 4}})}),
       3,
       {{"v1", "vision", 1, 16, false, "cpu", "placed"},  // first: 0 = 0, age; then vision 0.25
        {"v2", "vision", 1, 16, false, "cpu", "placed"},  // third: 0.25 = 0.25, and older than n1
        {"v3", "vision", 1, 16, false, "cpu", ""},        // vision 0.5 > nlp 0.25: no worker left
        {"n1", "nlp", 1, 16, false, "cpu", "placed"}}},   // second: nlp 0 < vision 0.25
      {"a team the quotas do not name is not limited",
       Quotas({Quota("vision", {{"cpu", 1}})}),
       2,
       {{"o1", "ops", 2, 16, false, "cpu", "placed"}}},
      {"a kind the team's quota does not name is not limited",
       Quotas({Quota("vision", {{"cuda", 1}})}),
       2,
       {{"v1", "vision", 2, 16, false, "cpu", "placed"}}},
      // Cohorts: a team borrows what the cohort's other teams leave idle of their quota.
      {"a team in a cohort borrows the others' idle quota, up to all of it",
       Quotas({Quota("vision", {{"cpu", 2}}, 0, "research"), Quota("nlp", {{"cpu", 2}}, 0, "research")}),
       5,
       {{"v1", "vision", 2, 16, false, "cpu", "placed"},
        {"v2", "vision", 2, 16, false, "cpu", "placed", 2},  // nlp's 2 idle slots
        {"v3", "vision", 1, 16, false, "cpu",
         "team vision over its quota: 4 of 2 cpu slots in use; its cohort research has none idle to lend"}}},
      {"a lender's own quota stays its own while it is lent",
       Quotas({Quota("vision", {{"cpu", 2}}, 0, "research"), Quota("nlp", {{"cpu", 2}}, 0, "research")}),
       2,
       {{"r", "vision", 4, 16, true},  // 2 of them borrowed from nlp
        {"n1", "nlp", 2, 16, false, "cpu", "placed"}}},
      {"what other teams borrowed is not lent twice",
       Quotas({Quota("a", {{"cpu", 2}}, 0, "research"), Quota("b", {{"cpu", 2}}, 0, "research"),
               Quota("c", {{"cpu", 2}}, 0, "research")}),
       8,
       {{"ra", "a", 3, 16, true},  // a borrows 1 of c's 2 idle slots: 1 is left to lend
        {"b1", "b", 4, 16, false, "cpu",
         "team b's quota of 2 cpu slots is less than the 4 this job needs; its cohort research lends 1 now"},
        {"c1", "c", 1, 16, false, "cpu", "placed"}}},
      {"borrowing what is left, after a lender's own job",
       Quotas({Quota("a", {{"cpu", 2}}, 0, "research"), Quota("b", {{"cpu", 2}}, 0, "research"),
               Quota("c", {{"cpu", 2}}, 0, "research")}),
       8,
       {{"ra", "a", 3, 16, true},                            // a borrows 1
        {"b1", "b", 3, 16, false, "cpu", "placed", 1},       // b borrows the last idle slot (c's)
        {"c1", "c", 2, 16, false, "cpu", "placed"}}},        // c's own 2, though lent: over the cohort
      {"a team of another cohort, or of none, lends nothing",
       Quotas({Quota("vision", {{"cpu", 2}}, 0, "research"), Quota("nlp", {{"cpu", 4}}, 0, "other"),
               Quota("ops", {{"cpu", 4}})}),
       8,
       {{"v1", "vision", 3, 16, false, "cpu",
         "team vision's quota of 2 cpu slots is less than the 3 this job needs; its cohort research has none idle to lend"}}},
      {"a job larger than its team's quota waits for what the cohort lends",
       Quotas({Quota("vision", {{"cuda", 2}}, 0, "research"), Quota("nlp", {{"cuda", 8}}, 0, "research")}),
       0,
       {{"rn", "nlp", 4, 16, true, "cuda"},
        {"big", "vision", 8, 16, false, "cuda",
         "team vision's quota of 2 GPUs is less than the 8 this job needs; its cohort research lends 4 now"}}},
      {"...and is admitted when that is enough (then waits for GPUs, not for its quota)",
       Quotas({Quota("vision", {{"cuda", 2}}, 0, "research"), Quota("nlp", {{"cuda", 8}}, 0, "research")}),
       0,
       {{"rn", "nlp", 4, 16, true, "cuda"}, {"big", "vision", 6, 16, false, "cuda", ""}}},
      // Per-cohort limits (Kueue's borrowingLimit, lendingLimit).
      {"a borrowing limit caps what a team borrows, though its cohort has more idle",
       Quotas({Limits(Quota("vision", {{"cpu", 2}}, 0, "research"), {{"cpu", 1}}),
               Quota("nlp", {{"cpu", 4}}, 0, "research")}),
       8,
       {{"v1", "vision", 2, 16, false, "cpu", "placed"},
        {"v2", "vision", 1, 16, false, "cpu", "placed", 1},
        {"v3", "vision", 1, 16, false, "cpu",
         "team vision over its quota: 3 of 2 cpu slots in use; its borrowing limit is 1 cpu slot beyond its quota"}}},
      {"a job larger than its quota and borrowing limit says so",
       Quotas({Limits(Quota("vision", {{"cpu", 2}}, 0, "research"), {{"cpu", 2}}),
               Quota("nlp", {{"cpu", 8}}, 0, "research")}),
       8,
       {{"big", "vision", 5, 16, false, "cpu",
         "team vision's quota of 2 cpu slots is less than the 5 this job needs; its borrowing limit is 2 cpu slots "
         "beyond its quota, 2 of them left"}}},
      {"...and one within them borrows up to the limit",
       Quotas({Limits(Quota("vision", {{"cpu", 2}}, 0, "research"), {{"cpu", 2}}),
               Quota("nlp", {{"cpu", 8}}, 0, "research")}),
       8,
       {{"fits", "vision", 4, 16, false, "cpu", "placed", 2}}},
      {"a lending limit keeps the rest of the lender's idle quota for it",
       Quotas({Quota("vision", {{"cpu", 2}}, 0, "research"), Limits(Quota("nlp", {{"cpu", 4}}, 0, "research"), {}, {{"cpu", 1}})}),
       8,
       {{"v1", "vision", 3, 16, false, "cpu", "placed", 1},
        {"v2", "vision", 1, 16, false, "cpu",
         "team vision over its quota: 3 of 2 cpu slots in use; its cohort research has none idle to lend"}}},
      {"a lender's own use takes from the part it keeps first",  // 3 of its 4 kept: it lends 2, not 3
       Quotas({Quota("vision", {{"cpu", 1}}, 0, "research"), Limits(Quota("nlp", {{"cpu", 6}}, 0, "research"), {}, {{"cpu", 2}})}),
       8,
       {{"rn", "nlp", 3, 16, true},
        {"v1", "vision", 4, 16, false, "cpu",
         "team vision's quota of 1 cpu slot is less than the 4 this job needs; its cohort research lends 2 now"}}},
      {"...and beyond that part, from what it lends (as without a limit)",
       Quotas({Quota("vision", {{"cpu", 1}}, 0, "research"), Limits(Quota("nlp", {{"cpu", 4}}, 0, "research"), {}, {{"cpu", 2}})}),
       8,
       {{"rn", "nlp", 3, 16, true},
        {"v1", "vision", 3, 16, false, "cpu",
         "team vision's quota of 1 cpu slot is less than the 3 this job needs; its cohort research lends 1 now"}}},
      {"no quotas: first come, first served (the big job holds back the small)",
       {},
       2,
       {{"v1", "vision", 3, 16, false, "cpu", ""}, {"n1", "nlp", 1, 16, false, "cpu", ""}}},
  };
}

TEST_P(SchedulerQuotaTest, QuotasCapsShareAndAgeDecideOnePass) {
  const QuotaCase& c = GetParam();
  SCOPED_TRACE(c.name);
  {
    for (int i = 0; i < c.cpu_workers; ++i) {
      sessions_.push_back(std::make_unique<FakeSession>());
      AddCpuWorker(sessions_.back().get(), absl::StrCat("h", i));
    }
    auto shared = std::make_shared<const TeamQuotas>(c.quotas);
    auto scheduler = WithQuotas([shared] { return shared; });
    std::vector<std::string> ids;
    for (const QuotaJob& j : c.jobs) ids.push_back(QueueJob(j));
    scheduler->Pass(200);
    for (size_t i = 0; i < c.jobs.size(); ++i) {
      const QuotaJob& j = c.jobs[i];
      if (j.running) continue;
      const v1::Job got = *store_->GetJob(ids[i]);
      if (j.expect == "placed") {
        EXPECT_EQ(got.state(), v1::SCHEDULED) << j.name << " held: " << scheduler->QuotaHold(ids[i]);
        EXPECT_EQ(scheduler->QuotaHold(ids[i]), "") << j.name;
        EXPECT_EQ(got.borrowed_slots(), j.borrowed) << j.name;
      } else {
        EXPECT_EQ(got.state(), v1::PENDING) << j.name;
        EXPECT_EQ(scheduler->QuotaHold(ids[i]), j.expect) << j.name;
      }
    }
  }
}

// An elastic job takes no more than its team's quota leaves, and grows no further; a quota
// raised (the principals file reloaded) lets a held job go at the next pass.
TEST_F(SchedulerQuotaTest, AnElasticJobStaysWithinItsQuotaAndAReloadLetsTheHeldGo) {
  for (int i = 0; i < 4; ++i) {
    sessions_.push_back(std::make_unique<FakeSession>());
    AddCpuWorker(sessions_.back().get(), absl::StrCat("h", i));
  }
  std::shared_ptr<const TeamQuotas> current = std::make_shared<const TeamQuotas>(Quotas({Quota("vision", {{"cpu", 2}})}));
  auto scheduler = WithQuotas([&current] { return current; });
  const std::string elastic = QueueJob({"e", "vision", 1}, "elastic: {min_dp: 1, max_dp: 4}\n");
  scheduler->Pass(200);
  v1::Job e = *store_->GetJob(elastic);
  ASSERT_EQ(e.state(), v1::SCHEDULED) << scheduler->QuotaHold(elastic);
  EXPECT_EQ(e.world_size(), 2) << "4 workers idle, 2 cpu slots of quota";
  const std::string held = QueueJob({"v", "vision", 1});
  scheduler->Pass(300);
  EXPECT_EQ(store_->GetJob(held)->state(), v1::PENDING);
  EXPECT_EQ(scheduler->QuotaHold(held), "team vision at its quota: 2 of 2 cpu slots");
  current = std::make_shared<const TeamQuotas>(Quotas({Quota("vision", {{"cpu", 3}})}));
  scheduler->Pass(400);
  EXPECT_EQ(store_->GetJob(held)->state(), v1::SCHEDULED);
  EXPECT_EQ(scheduler->QuotaHold(held), "");
  // One worker idle, no room left in the quota: no growth; room for 3 more: it grows by the one idle.
  const auto spec = specs_.Of(e);
  ASSERT_TRUE(spec);
  e.set_state(v1::RUNNING);
  ASSERT_TRUE(store_->PutJob(e).ok());
  EXPECT_EQ(scheduler->GrowTarget(e, *spec), 0);
  current = std::make_shared<const TeamQuotas>(Quotas({Quota("vision", {{"cpu", 6}})}));
  EXPECT_EQ(scheduler->GrowTarget(e, *spec), 3);
  // No quotas (unset, null, empty): the idle worker alone says.
  for (auto none : std::vector<std::function<std::shared_ptr<const TeamQuotas>()>>{
           nullptr, [] { return std::shared_ptr<const TeamQuotas>(); },
           [] { return std::make_shared<const TeamQuotas>(); }}) {
    auto plain = WithQuotas(none);
    EXPECT_FALSE(plain->QuotasInForce());
    EXPECT_EQ(plain->GrowTarget(e, *spec), 3) << "2 placed + the 1 idle worker";
  }
}

// Reclaim (issue 50 items 3 and 4): a job within its team's own quota that waits for workers
// takes back, by preemption, the slots its cohort's other teams borrowed, whatever their
// priority; a job running within its own team's quota, or borrowing in another cohort, is left
// alone. A job that may not be preempted never borrows: it waits beyond its own quota.
TEST_F(SchedulerQuotaTest, ATeamWithinItsQuotaReclaimsWhatItsCohortBorrowedAndAPinnedJobDoesNotBorrow) {
  auto shared = std::make_shared<const TeamQuotas>(
      Quotas({Quota("vision", {{"cpu", 2}}, 0, "research"), Quota("nlp", {{"cpu", 2}}, 0, "research"),
              Quota("ops", {{"cpu", 2}}, 0, "other")}));
  auto scheduler = WithQuotas([shared] { return shared; });
  auto running = [&](const std::string& name, const std::string& team, int world, int priority, int borrowed) {
    const std::string id = QueueJob({name, team, world, priority, true});
    v1::Job j = *store_->GetJob(id);
    j.set_borrowed_slots(borrowed);
    EXPECT_TRUE(store_->PutJob(j).ok());
    return id;
  };
  // Not of lower priority than the job that waits: none is preempted for its priority.
  running("own", "vision", 2, 16, 0);                            // vision's own quota
  const std::string lent = running("lent", "vision", 2, 20, 2);  // nlp's 2, borrowed
  running("far", "ops", 3, 16, 1);                               // borrowed in another cohort
  // nlp wants its own 2; no worker is idle.
  const std::string mine = QueueJob({"mine", "nlp", 2, 16});
  scheduler->Pass(200);
  EXPECT_EQ(store_->GetJob(mine)->state(), v1::PENDING);
  EXPECT_EQ(scheduler->QuotaHold(mine), "") << "within its quota: it waits for workers";
  ASSERT_EQ(host_.preemptions.size(), 1u);
  EXPECT_EQ(host_.preemptions[0].victim, lent);
  EXPECT_EQ(host_.preemptions[0].by, mine);
  EXPECT_EQ(host_.preemptions[0].reason, "job " + mine + " of team nlp needs 2 cpu slots within its team's quota "
                                         "and 0 are idle: cohort research reclaims the 2 team vision borrowed");

  // A second cohort of idle quota: a job that may not be preempted does not borrow it.
  TeamQuotas more = *shared;
  more["hpc"] = Quota("hpc", {{"cpu", 1}}, 0, "spare");
  more["idle"] = Quota("idle", {{"cpu", 4}}, 0, "spare");
  auto second = std::make_shared<const TeamQuotas>(more);
  auto pinned_scheduler = WithQuotas([second] { return second; });
  for (int i = 0; i < 3; ++i) {
    sessions_.push_back(std::make_unique<FakeSession>());
    AddCpuWorker(sessions_.back().get(), absl::StrCat("p", i));
  }
  const std::string pinned = QueueJob({"pinned", "hpc", 2, 16}, "scheduling: {preemptible: false}\n");
  v1::Job p = *store_->GetJob(pinned);
  p.set_not_preemptible(true);
  ASSERT_TRUE(store_->PutJob(p).ok());
  const std::string borrower = QueueJob({"borrower", "hpc", 2, 15});
  pinned_scheduler->Pass(300);
  EXPECT_EQ(store_->GetJob(pinned)->state(), v1::PENDING);
  EXPECT_EQ(pinned_scheduler->QuotaHold(pinned),
            "team hpc's quota of 1 cpu slot is less than the 2 this job needs; it may not be preempted, so it does "
            "not borrow");
  EXPECT_EQ(pinned_scheduler->QuotaHold(borrower), pinned_scheduler->QuotaHold(pinned))
      << "the team's jobs behind its held head wait with it";
}

// queue_position (Scheduler::QueuePositions) is the order the passes place jobs in: with
// quotas the fair share's (priority, then the team's dominant share as it grows with each job
// placed before, then age), not the store's (priority, then age); one worker freed at a time,
// each pass places the job that was first. Without quotas it is the store's order.
TEST_F(SchedulerQuotaTest, QueuePositionsAreTheOrderThePassesPlaceJobsIn) {
  auto shared = std::make_shared<const TeamQuotas>(Quotas({Quota("vision", {{"cpu", 4}}), Quota("nlp", {{"cpu", 4}})}));
  auto scheduler = WithQuotas([shared] { return shared; });
  QueueJob({"r", "vision", 2, 16, true});  // vision uses 2 of 4: share 0.5
  const std::string v1 = QueueJob({"v1", "vision", 1, 16});
  const std::string v2 = QueueJob({"v2", "vision", 1, 16});
  const std::string n1 = QueueJob({"n1", "nlp", 1, 16});
  const std::string n2 = QueueJob({"n2", "nlp", 1, 16});
  const std::string h = QueueJob({"h", "ops", 1, 17});  // the newest, of the highest priority
  // nlp (share 0, then 0.25) before vision (0.5); at 0.5 each, age: v1 before v2.
  const std::vector<std::string> want = {h, n1, n2, v1, v2};
  for (const std::string& id : want) specs_.Of(*store_->GetJob(id));  // their kind known: in its queue
  auto order = [](const std::map<std::string, std::pair<int64_t, std::string>>& positions) {
    std::vector<std::string> ids(positions.size());
    for (const auto& [id, at] : positions) {
      if (at.first >= 1 && at.first <= static_cast<int64_t>(ids.size())) ids[at.first - 1] = id;
    }
    return ids;
  };
  const auto positions = scheduler->QueuePositions();
  EXPECT_EQ(order(positions), want);
  EXPECT_EQ(positions.at(n1), std::make_pair(int64_t{2}, h)) << "its place and the job before it";
  EXPECT_EQ(order(store_->QueuePositions()), (std::vector<std::string>{h, v1, v2, n1, n2}))
      << "the store's order, which queue_position reported before the fair share's";
  // The passes place them in that order, one freed worker at a time.
  std::vector<std::string> placed;
  for (int i = 0; i < 5; ++i) {
    const auto before = order(scheduler->QueuePositions());
    ASSERT_FALSE(before.empty());
    sessions_.push_back(std::make_unique<FakeSession>());
    AddCpuWorker(sessions_.back().get(), absl::StrCat("h", i));
    scheduler->Pass(200 + 100 * i);
    for (const std::string& id : before) {
      auto job = store_->GetJob(id);
      ASSERT_TRUE(job.ok()) << id << ": " << job.status();
      if (job->state() == v1::SCHEDULED) placed.push_back(id);
    }
    ASSERT_EQ(placed.size(), static_cast<size_t>(i + 1)) << "one job per freed worker";
    EXPECT_EQ(placed.back(), before.front()) << "pass " << i << " placed the job at position 1";
  }
  EXPECT_EQ(placed, want);
  EXPECT_TRUE(scheduler->QueuePositions().empty());
  // Without quotas: the store's order.
  const std::string a = QueueJob({"a", "vision", 1, 16}), b = QueueJob({"b", "nlp", 1, 16});
  for (const std::string& id : {a, b}) specs_.Of(*store_->GetJob(id));
  auto plain = WithQuotas(nullptr);
  EXPECT_EQ(plain->QueuePositions(), store_->QueuePositions());
  EXPECT_EQ(order(plain->QueuePositions()), (std::vector<std::string>{a, b}));
}

INSTANTIATE_TEST_SUITE_P(Cases, SchedulerQuotaTest, ::testing::ValuesIn(QuotaCases()),
                         [](const ::testing::TestParamInfo<QuotaCase>& info) { return absl::StrCat("Case", info.index); });
}  // namespace
}  // namespace gantry::coordinator
