#include "coordinator/cluster.h"

#include <gtest/gtest.h>

#include <future>

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

}  // namespace
}  // namespace gantry::coordinator
