// The coordinator's placement rules and its rendezvous store, as plain functions and one
// object: no cluster, no RPC.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/placement.h"
#include "coordinator/rendezvous.h"

namespace gantry::coordinator {
namespace {

v1::Job QueuedJob(const std::string& id, v1::JobState state, int priority) {
  v1::Job j;
  j.set_id(id);
  j.set_state(state);
  j.set_priority(priority);
  return j;
}

TEST(PlacementTest, QueueOrderIsPriorityThenRestartsThenSubmission) {
  const std::vector<v1::Job> jobs = {
      QueuedJob("j1", v1::PENDING, 0),    QueuedJob("j2", v1::RUNNING, 9), QueuedJob("j3", v1::RESTARTING, 0),
      QueuedJob("j4", v1::PENDING, 5),    QueuedJob("j5", v1::SUCCEEDED, 9), QueuedJob("j6", v1::RESTARTING, 5),
      QueuedJob("j0", v1::PENDING, 0)};
  std::vector<std::string> order;
  for (const auto& j : placement::QueueOrder(jobs)) order.push_back(j.id());
  EXPECT_EQ(order, (std::vector<std::string>{"j6", "j4", "j3", "j0", "j1"}));
}

// Found in review: ids compared as text put the millionth job (j-1000000) before every
// earlier one of its priority (j-999999, j-200000): it would jump the queue.
TEST(PlacementTest, TheMillionthJobQueuesAfterTheEarlierOnes) {
  const std::vector<v1::Job> jobs = {QueuedJob("j-1000000", v1::PENDING, 0), QueuedJob("j-999999", v1::PENDING, 0),
                                     QueuedJob("j-200000", v1::PENDING, 0), QueuedJob("j-10000000", v1::PENDING, 0)};
  std::vector<std::string> order;
  for (const auto& j : placement::QueueOrder(jobs)) order.push_back(j.id());
  EXPECT_EQ(order, (std::vector<std::string>{"j-200000", "j-999999", "j-1000000", "j-10000000"}));
}

TEST(PlacementTest, RestartBackoffDoublesFromTheSecondRestartUpTo16Seconds) {
  const std::vector<int64_t> want = {0, 0, 1000, 2000, 4000, 8000, 16000, 16000, 16000};
  for (size_t n = 0; n < want.size(); ++n) EXPECT_EQ(placement::RestartBackoffMs(static_cast<int>(n)), want[n]) << n;
}

TEST(PlacementTest, ARestartingJobWaitsForItsCheckpointServersOnlyUntilTheWaitEnds) {
  v1::Job j = QueuedJob("j", v1::RESTARTING, 0);
  j.set_failure_time_unix_ms(1000);
  j.add_checkpoint_servers("a:1");
  j.add_checkpoint_servers("b:1");
  EXPECT_EQ(placement::MissingCheckpointServers(j, {"a:1"}, 1500, 1000), std::vector<std::string>{"b:1"});
  EXPECT_TRUE(placement::MissingCheckpointServers(j, {"a:1", "b:1"}, 1500, 1000).empty());
  EXPECT_TRUE(placement::MissingCheckpointServers(j, {"a:1"}, 2000, 1000).empty()) << "the wait is over";
  j.set_state(v1::PENDING);
  EXPECT_TRUE(placement::MissingCheckpointServers(j, {}, 1500, 1000).empty()) << "only a restart waits";
}

// The worker of each rank, for placements of one-slot workers.
std::vector<size_t> WorkersOf(const std::vector<placement::Slot>& slots) {
  std::vector<size_t> out;
  for (const auto& s : slots) {
    EXPECT_EQ(s.local, 0) << "a one-slot worker hosts one rank";
    out.push_back(s.worker);
  }
  return out;
}

std::vector<placement::IdleWorker> OneSlotEach(const std::vector<std::string>& hosts) {
  std::vector<placement::IdleWorker> out;
  for (const auto& h : hosts) out.push_back({h, 1});
  return out;
}

TEST(PlacementTest, RanksPackOntoTheFullestHostsAndTensorParallelGroupsNeverSpanHosts) {
  // Workers 0..6: three on h1, one on h2, three on h3.
  const auto idle = OneSlotEach({"h1", "h3", "h1", "h2", "h3", "h1", "h3"});
  // The fullest hosts first (h1 before h3 on a tie, by name), consecutive ranks on one host.
  EXPECT_EQ(WorkersOf(placement::ChooseSlots(idle, 4, 1)), (std::vector<size_t>{0, 2, 5, 1}));
  // tp 2: one whole group from each host of three; h2's single worker can hold no group.
  EXPECT_EQ(WorkersOf(placement::ChooseSlots(idle, 4, 2)), (std::vector<size_t>{0, 2, 1, 4}));
  EXPECT_TRUE(placement::ChooseSlots(idle, 6, 2).empty()) << "only two whole groups of 2 fit on h1 and h3";
  EXPECT_TRUE(placement::ChooseSlots(idle, 8, 1).empty()) << "all ranks or none";
  EXPECT_EQ(placement::ChooseSlots(idle, 7, 1).size(), 7u);
  EXPECT_EQ(WorkersOf(placement::ChooseSlots(idle, 1, 1)), (std::vector<size_t>{0})) << "the fullest host's first";
}

TEST(PlacementTest, AGpuWorkerHostsOneRankPerGpuAndTheLocalIndexIsTheDeviceOrdinal) {
  v1::Resources r;
  r.set_device_kind("cuda");
  r.set_device_count(8);
  EXPECT_EQ(placement::SlotsOf(r), 8) << "one rank per GPU";
  r.set_device_count(0);
  EXPECT_EQ(placement::SlotsOf(r), 0) << "a cuda worker that sees no GPU hosts no rank";
  r.set_device_kind("cpu");
  r.set_device_count(4);
  EXPECT_EQ(placement::SlotsOf(r), 1) << "a cpu worker hosts one rank";

  using S = placement::Slot;
  // a: 8 GPUs on h1, b: 2 on h2, c: 4 on h3, d: 0 (none visible) on h4.
  const std::vector<placement::IdleWorker> idle = {{"h1", 8}, {"h2", 2}, {"h3", 4}, {"h4", 0}};
  // Best fit: the smallest worker that holds the whole job, ranks on devices 0, 1, ...
  EXPECT_EQ(placement::ChooseSlots(idle, 1, 1), (std::vector<S>{{1, 0}}));
  EXPECT_EQ(placement::ChooseSlots(idle, 2, 1), (std::vector<S>{{1, 0}, {1, 1}}));
  EXPECT_EQ(placement::ChooseSlots(idle, 4, 2), (std::vector<S>{{2, 0}, {2, 1}, {2, 2}, {2, 3}}));
  EXPECT_EQ(placement::ChooseSlots(idle, 8, 8).size(), 8u);
  for (const auto& s : placement::ChooseSlots(idle, 8, 8)) EXPECT_EQ(s.worker, 0u);
  // Too big for one worker: the fullest first, each worker's ranks on consecutive devices.
  EXPECT_EQ(placement::ChooseSlots(idle, 12, 4),
            (std::vector<S>{{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}, {0, 6}, {0, 7}, {2, 0}, {2, 1}, {2, 2}, {2, 3}}));
  EXPECT_EQ(placement::ChooseSlots(idle, 14, 2).size(), 14u);
  EXPECT_TRUE(placement::ChooseSlots(idle, 15, 1).empty()) << "14 GPUs: all ranks or none";
  EXPECT_TRUE(placement::ChooseSlots(idle, 16, 8).empty()) << "a tp group of 8 fits on h1 only";
  // Two workers of 3 GPUs on one host: a tp group of 4 may span them (same host), the rest
  // of the host cannot hold a second group.
  const std::vector<placement::IdleWorker> two = {{"h", 3}, {"h", 3}};
  EXPECT_EQ(placement::ChooseSlots(two, 4, 4), (std::vector<S>{{0, 0}, {0, 1}, {0, 2}, {1, 0}}));
  EXPECT_TRUE(placement::ChooseSlots(two, 8, 4).empty());
  EXPECT_EQ(placement::ChooseSlots(two, 3, 1), (std::vector<S>{{0, 0}, {0, 1}, {0, 2}})) << "best fit on a tie: the first";
}

TEST(PlacementTest, AWorkerOffersTheDeviceKindItReportsAndCpuWhenItReportsNone) {
  v1::Resources r;
  EXPECT_TRUE(placement::Offers(r, "cpu"));
  EXPECT_FALSE(placement::Offers(r, "cuda-emulated"));
  r.set_device_kind("cuda-emulated");
  EXPECT_TRUE(placement::Offers(r, "cuda-emulated"));
  EXPECT_FALSE(placement::Offers(r, "cpu"));
  EXPECT_FALSE(placement::Offers(r, "cuda"));
}

TEST(PlacementTest, ParameterRangesCoverTheModelOnceOverTheServers) {
  jobspec::JobSpec spec;
  spec.model.n_layer = 1;
  spec.model.n_head = 1;
  spec.model.n_embd = 8;
  spec.model.vocab_size = 16;
  spec.model.max_seq_len = 8;
  const auto ranges = placement::ParamRanges(spec, {"s1:1", "s2:1"}, [](const std::string& s) { return s + "-data"; });
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].begin(), 0);
  EXPECT_EQ(ranges[0].end(), ranges[1].begin());
  EXPECT_GT(ranges[1].end(), ranges[1].begin());
  for (const auto& r : ranges) EXPECT_EQ(r.data_address(), r.shard_server() + "-data");
}

TEST(PlacementTest, TheResumePointIsTheNewestOfRecordAndManifestsThenResumeFrom) {
  const v1::Job job = QueuedJob("j", v1::RESTARTING, 0);
  jobspec::JobSpec spec;
  using Point = std::pair<std::string, int64_t>;
  EXPECT_EQ(*placement::ResumePoint(job, spec, {0, 0}, {0, 0}), Point("", 0)) << "a fresh start";
  EXPECT_EQ(*placement::ResumePoint(job, spec, {4, 6}, {0, 0}), Point("j", 6)) << "a commit the record missed";
  EXPECT_EQ(*placement::ResumePoint(job, spec, {8, 6}, {0, 0}), Point("j", 8));
  spec.checkpoint.resume_from = "base";
  EXPECT_EQ(*placement::ResumePoint(job, spec, {0, 0}, {3, 5}), Point("base", 5));
  EXPECT_EQ(*placement::ResumePoint(job, spec, {2, 0}, {3, 5}), Point("j", 2)) << "its own checkpoint comes first";
  EXPECT_TRUE(absl::IsNotFound(placement::ResumePoint(job, spec, {0, 0}, {0, 0}).status()));
  spec.checkpoint.resume_from = "base@7";
  EXPECT_EQ(*placement::ResumePoint(job, spec, {0, 0}, {0, 0}), Point("base", 7)) << "JOB@STEP as given";
  spec.checkpoint.resume_from = "base@x";
  const auto bad = placement::ResumePoint(job, spec, {0, 0}, {0, 0});
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("'base@x' is not JOB or JOB@STEP"), std::string::npos) << bad.status();
}

TEST(RendezvousTest, AGetWaitsForItsPutAndIsScopedByGeneration) {
  Rendezvous rdv;
  std::vector<absl::StatusOr<std::string>> got;
  auto keep = [&](absl::StatusOr<std::string> v) { got.push_back(std::move(v)); };
  rdv.Get("j", 1, "k", /*wait_ms=*/0, 0, keep);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(absl::IsNotFound(got[0].status())) << got[0].status();
  rdv.Get("j", 1, "k", 1000, 0, keep);
  rdv.Put("j", 2, "k", "other generation");
  EXPECT_EQ(got.size(), 1u) << "another generation's key answers nothing";
  rdv.Put("j", 1, "k", "v");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(*got[1], "v");
  rdv.Get("j", 1, "k", 0, 0, keep);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(*got[2], "v");
}

TEST(RendezvousTest, DropKeepsFailureReportsAndExpireEndsTheWait) {
  Rendezvous rdv;
  const std::string report = std::string(Rendezvous::kFailureReportPrefix) + "rank1";
  std::vector<absl::StatusOr<std::string>> got;
  auto keep = [&](absl::StatusOr<std::string> v) { got.push_back(std::move(v)); };
  rdv.Put("j", 1, "addr", "x");
  rdv.Put("j", 1, report, "lost peer");
  rdv.Get("j", 1, "late", 1000, 0, keep);
  rdv.Get("j", 1, report + "-other", 1000, 0, keep);
  rdv.Drop("j");
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(absl::IsAborted(got[0].status())) << got[0].status();
  rdv.Get("j", 1, "addr", 0, 0, keep);
  EXPECT_TRUE(absl::IsNotFound(got[1].status())) << "the placement's keys went";
  rdv.Get("j", 1, report, 0, 0, keep);
  EXPECT_EQ(*got[2], "lost peer") << "a failure report stays";
  rdv.Expire(999);
  EXPECT_EQ(got.size(), 3u) << "the report's wait has not run out";
  rdv.Expire(1000);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_TRUE(absl::IsDeadlineExceeded(got[3].status())) << got[3].status();
}

// A process group's keys are under its name: its failure reports stay too (a lost peer in a
// dp or tp group is named after the job failed), and a key that only resembles one does not.
TEST(RendezvousTest, AGroupsFailureReportsUnderItsNameAreFailureReportsToo) {
  EXPECT_TRUE(Rendezvous::IsFailureReport("gantry/failed/2"));
  EXPECT_TRUE(Rendezvous::IsFailureReport("world/gantry/failed/2"));
  EXPECT_TRUE(Rendezvous::IsFailureReport("dp/s0/t1/gantry/failed/0"));
  EXPECT_FALSE(Rendezvous::IsFailureReport("dp/s0/t1/xgantry/failed/0"));
  EXPECT_FALSE(Rendezvous::IsFailureReport("dp/s0/t1/0"));
  EXPECT_FALSE(Rendezvous::IsFailureReport("gantry/nccl_unique_id"));
  Rendezvous rdv;
  std::vector<absl::StatusOr<std::string>> got;
  rdv.Put("j", 1, "tp/s0/r0/gantry/failed/1", "lost peer");
  rdv.Drop("j");
  rdv.Get("j", 1, "tp/s0/r0/gantry/failed/1", 0, 0, [&](absl::StatusOr<std::string> v) { got.push_back(std::move(v)); });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(*got[0], "lost peer");
}

}  // namespace
}  // namespace gantry::coordinator
