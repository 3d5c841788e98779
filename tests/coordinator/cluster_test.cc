#include "coordinator/cluster.h"

#include <gtest/gtest.h>

#include <future>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "tests/coordinator/cluster_test_util.h"
#include "tests/test_util.h"

namespace gantry::coordinator {
namespace {

class RendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *Store::Open(dir_.File("db"));
    v1::Job j;
    j.set_name("j");
    j.set_state(v1::PENDING);
    job_ = *store_->CreateJob(j);
    auto job = *store_->GetJob(job_);
    job.set_state(v1::RUNNING);
    job.set_generation(3);
    ASSERT_TRUE(store_->PutJob(job).ok());
    cluster_ = std::make_unique<Cluster>(store_.get(), &registry_, ClusterOptions{});
  }
  // Starts a Get; the future resolves when done is called.
  std::future<absl::StatusOr<std::string>> Get(const std::string& key, int64_t wait_ms, int64_t gen = 3) {
    auto p = std::make_shared<std::promise<absl::StatusOr<std::string>>>();
    auto f = p->get_future();
    cluster_->RendezvousGet(job_, gen, key, wait_ms, [p](absl::StatusOr<std::string> v) { p->set_value(std::move(v)); });
    return f;
  }
  testing::TempDir dir_;
  metrics::Registry registry_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Cluster> cluster_;
  std::string job_;
};

TEST_F(RendezvousTest, PutThenGet) {
  ASSERT_TRUE(cluster_->RendezvousPut(job_, 3, "nccl_id", "abc").ok());
  auto f = Get("nccl_id", 0);
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  auto v = f.get();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "abc");
}

TEST_F(RendezvousTest, GetWaitsForThePut) {
  auto f = Get("addr/1", 30000);
  EXPECT_EQ(f.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  ASSERT_TRUE(cluster_->RendezvousPut(job_, 3, "addr/1", "127.0.0.1:5000").ok());
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(*f.get(), "127.0.0.1:5000");
}

TEST_F(RendezvousTest, GetWithoutWaitIsNotFoundAndAWaitEnds) {
  EXPECT_EQ(Get("missing", 0).get().status().code(), absl::StatusCode::kNotFound);
  auto f = Get("missing", 200);
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(f.get().status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(RendezvousTest, StaleGenerationIsRefused) {
  auto put = cluster_->RendezvousPut(job_, 2, "k", "v");
  EXPECT_EQ(put.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(put.message().find("generation 3, not 2"), absl::string_view::npos) << put;
  EXPECT_EQ(Get("k", 0, 4).get().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(RendezvousTest, WaitersAreReleasedWhenTheJobEnds) {
  auto f = Get("never", 60000);
  ASSERT_TRUE(cluster_->CancelJob(job_).ok());
  ASSERT_EQ(f.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(f.get().status().code(), absl::StatusCode::kAborted);
}

// The per-team series (gantry_coordinator_team_*): slots used, quota and borrowed per team and
// device kind, queued and held jobs, and the wait of the oldest job that its own quota does
// not hold; a series no longer reported leaves the page. The monitor's round (100 ms)
// refreshes them: each check waits for the page to say it.
class TeamSeriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *Store::Open(dir_.File("db"));
    quotas_ = Quotas({{"vision", 2}, {"nlp", 4}});
    ClusterOptions o;
    o.placement_grace_ms = 0;  // placed without a shard server
    o.quotas = [this] {
      std::lock_guard<std::mutex> l(mu_);
      return quotas_;
    };
    cluster_ = std::make_unique<Cluster>(store_.get(), &registry_, o);
  }
  static std::shared_ptr<const TeamQuotas> Quotas(const std::vector<std::pair<std::string, int64_t>>& cpu) {
    TeamQuotas q;
    for (const auto& [team, n] : cpu) {
      q[team].team = team;
      q[team].nominal["cpu"] = n;
    }
    return std::make_shared<const TeamQuotas>(std::move(q));
  }
  void SetQuotas(std::shared_ptr<const TeamQuotas> q) {
    std::lock_guard<std::mutex> l(mu_);
    quotas_ = std::move(q);
  }
  // A queued job of `team` with `world` ranks of `device`, queued `waited_ms` ago.
  std::string Queue(const std::string& team, int world, const std::string& device, int64_t waited_ms) {
    v1::Job j;
    j.set_name(team + "-job");
    j.set_team(team);
    j.set_state(v1::PENDING);
    j.set_world_size(world);
    j.set_submit_time_unix_ms(NowUnixMs() - waited_ms);
    j.set_update_time_unix_ms(j.submit_time_unix_ms());
    j.set_spec_yaml(absl::StrCat("model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\n",
                                 "data: {train: /nonexistent.bin}\ntrain: {steps: 100, micro_batch: 1, lr: 1.0e-3}\n",
                                 "parallel: {dp: ", world, "}\nresources: {device: ", device, "}\n"));
    return *store_->CreateJob(j);
  }
  // The page holds every line (each "name{labels} value") within 10 s.
  bool PageSays(const std::vector<std::string>& lines) {
    return testing::PollUntil(
        [&] {
          const std::string page = registry_.Render();
          for (const auto& l : lines) {
            if (page.find(l + "\n") == std::string::npos) return false;
          }
          return true;
        },
        std::chrono::seconds(10));
  }
  // The page holds no series with these labels within 10 s.
  bool PageLacks(const std::string& labels) {
    return testing::PollUntil([&] { return registry_.Render().find(labels) == std::string::npos; }, std::chrono::seconds(10));
  }
  // The value of one series now (-1: absent).
  double Value(const std::string& series) {
    const std::string page = registry_.Render();
    const size_t at = page.find(series + " ");
    return at == std::string::npos ? -1 : std::stod(page.substr(at + series.size() + 1));
  }

  testing::TempDir dir_;
  metrics::Registry registry_;
  std::unique_ptr<Store> store_;
  std::mutex mu_;
  std::shared_ptr<const TeamQuotas> quotas_;
  std::unique_ptr<Cluster> cluster_;
  FakeSession workers_[3];
};

TEST_F(TeamSeriesTest, UseQuotaBorrowingQueuesAndTheOldestWaitPerTeam) {
  v1::Resources cpu;
  cpu.set_host("h");
  cpu.set_device_kind("cpu");
  cpu.set_device_count(1);
  for (auto& w : workers_) cluster_->AddWorker(&w, cpu);
  const std::string placed = Queue("vision", 2, "cpu", 0);
  const std::string held = Queue("vision", 1, "cpu", 3600000);    // an hour: held by vision's quota
  const std::string waits = Queue("", 1, "cuda", 7200000);        // two hours: no cuda worker
  cluster_->JobSubmitted();
  ASSERT_EQ(store_->GetJob(placed)->state(), v1::SCHEDULED);
  ASSERT_EQ(cluster_->QuotaHold(held), "team vision at its quota: 2 of 2 cpu slots");
  EXPECT_TRUE(PageSays({
      R"m(gantry_coordinator_team_slots_used{device="cpu",team="vision"} 2)m",
      R"m(gantry_coordinator_team_slots_quota{device="cpu",team="vision"} 2)m",
      R"m(gantry_coordinator_team_slots_borrowed{device="cpu",team="vision"} 0)m",
      R"m(gantry_coordinator_team_jobs_queued{team="vision"} 1)m",
      R"m(gantry_coordinator_team_jobs_held{team="vision"} 1)m",
      // Its only queued job waits for its own quota: not starved.
      R"m(gantry_coordinator_team_oldest_wait_seconds{team="vision"} 0)m",
      // A team with a quota and nothing placed or queued has its series at 0.
      R"m(gantry_coordinator_team_slots_used{device="cpu",team="nlp"} 0)m",
      R"m(gantry_coordinator_team_slots_quota{device="cpu",team="nlp"} 4)m",
      R"m(gantry_coordinator_team_jobs_queued{team="nlp"} 0)m",
      // Jobs without a team: "(none)"; no quota series for a kind not limited.
      R"m(gantry_coordinator_team_jobs_queued{team="(none)"} 1)m",
      R"m(gantry_coordinator_team_jobs_held{team="(none)"} 0)m",
  })) << registry_.Render();
  const double oldest = Value(R"m(gantry_coordinator_team_oldest_wait_seconds{team="(none)"})m");
  EXPECT_GE(oldest, 7200) << registry_.Render();
  EXPECT_LT(oldest, 7200 + 60) << "queued two hours ago, not at the submit of another job";
  EXPECT_EQ(registry_.Render().find(R"m(gantry_coordinator_team_slots_quota{device="cuda")m"), std::string::npos);
  // A reload: nlp's quota gone (its series leave the page), vision's lowered under its use (1
  // slot over it), the held job still held.
  SetQuotas(Quotas({{"vision", 1}}));
  cluster_->JobSubmitted();
  EXPECT_TRUE(PageLacks(R"m(team="nlp")m")) << registry_.Render();
  EXPECT_TRUE(PageSays({
      R"m(gantry_coordinator_team_slots_quota{device="cpu",team="vision"} 1)m",
      R"m(gantry_coordinator_team_slots_borrowed{device="cpu",team="vision"} 1)m",
      R"m(gantry_coordinator_team_jobs_held{team="vision"} 1)m",
  })) << registry_.Render();
  // The placed job cancelled: the held one goes, and vision's queue is empty.
  ASSERT_TRUE(cluster_->CancelJob(placed).ok());
  SetQuotas(Quotas({{"vision", 2}}));
  cluster_->JobSubmitted();
  ASSERT_EQ(store_->GetJob(held)->state(), v1::SCHEDULED);
  EXPECT_TRUE(PageSays({
      R"m(gantry_coordinator_team_slots_used{device="cpu",team="vision"} 1)m",
      R"m(gantry_coordinator_team_slots_borrowed{device="cpu",team="vision"} 0)m",
      R"m(gantry_coordinator_team_jobs_queued{team="vision"} 0)m",
      R"m(gantry_coordinator_team_jobs_held{team="vision"} 0)m",
  })) << registry_.Render();
}

}  // namespace
}  // namespace gantry::coordinator
