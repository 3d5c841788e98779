// Membership on its own (coordinator/membership.h): ids, liveness by explicit time, the
// retention of dead workers, counts by device kind, heartbeat progress and GPUs, shard servers.
#include "coordinator/membership.h"

#include <gtest/gtest.h>

#include "tests/coordinator/cluster_test_util.h"

namespace gantry::coordinator {
namespace {

v1::Resources Cpu(const std::string& host, int64_t memory = 1 << 30) {
  v1::Resources r;
  r.set_host(host);
  r.set_device_kind("cpu");
  r.set_device_count(1);
  r.set_memory_bytes(memory);
  return r;
}

MembershipOptions Options() {
  MembershipOptions o;
  o.worker_timeout_ms = 100;
  o.dead_worker_retention_ms = 1000;
  o.shard_timeout_ms = 50;
  return o;
}

TEST(MembershipUnitTest, WorkersGetFreshIdsAndStartIdle) {
  Membership m(Options());
  FakeSession a, b;
  const std::string ida = m.Add(&a, Cpu("h1"), 0).info.id();
  const std::string idb = m.Add(&b, Cpu("h2"), 0).info.id();
  EXPECT_EQ(ida, "w-000001");
  EXPECT_EQ(idb, "w-000002");
  ASSERT_NE(m.FindAttached(ida), nullptr);
  EXPECT_TRUE(m.FindAttached(ida)->idle());
  EXPECT_EQ(m.Find("w-999999"), nullptr);
  EXPECT_EQ(m.List().size(), 2u);
}

TEST(MembershipUnitTest, SilenceIsMeasuredFromTheLastHeartbeat) {
  Membership m(Options());
  FakeSession a, b;
  const std::string ida = m.Add(&a, Cpu("h1"), 0).info.id();
  const std::string idb = m.Add(&b, Cpu("h2"), 0).info.id();
  m.Heartbeat(idb, 90);
  EXPECT_TRUE(m.SilentIds(100).empty());  // exactly the timeout: not yet
  EXPECT_EQ(m.SilentIds(101), std::vector<std::string>{ida});
  // A worker whose messages wait in the coordinator's own backlog is not counted out.
  a.backlogged = true;
  EXPECT_TRUE(m.SilentIds(150).empty());
  a.backlogged = false;
  EXPECT_EQ(m.SilentIds(191), (std::vector<std::string>{ida, idb}));
  m.Heartbeat("w-424242", 191);  // unknown: ignored
}

TEST(MembershipUnitTest, DeadWorkersStayListedForTheRetentionThenGo) {
  Membership m(Options());
  FakeSession a;
  Member& w = m.Add(&a, Cpu("h1", 8 << 20), 0);
  const std::string id = w.info.id();
  EXPECT_EQ(m.LargestMemory(), 8 << 20);
  m.MarkDead(w, 200);
  EXPECT_EQ(m.FindAttached(id), nullptr);
  ASSERT_NE(m.Find(id), nullptr);
  EXPECT_EQ(m.Find(id)->info.state(), "dead");
  EXPECT_EQ(m.LargestMemory(), 0);  // only attached workers count
  EXPECT_TRUE(m.SilentIds(10000).empty());  // the dead are not silent
  m.ForgetDead(1199);
  EXPECT_NE(m.Find(id), nullptr);
  m.ForgetDead(1200);
  EXPECT_EQ(m.Find(id), nullptr);
  EXPECT_TRUE(m.List().empty());
}

TEST(MembershipUnitTest, CountsAndIdleFollowAssignmentsAndDeviceKinds) {
  Membership m(Options());
  FakeSession a, b, c;
  Member& wa = m.Add(&a, Cpu("h1"), 0);
  m.Add(&b, Cpu("h2"), 0);
  v1::Resources gpu = Cpu("h3");
  gpu.set_device_kind("cuda");
  gpu.set_device_count(4);
  m.Add(&c, gpu, 0);
  EXPECT_EQ(m.Count("cpu").alive, 2);
  EXPECT_EQ(m.Count("cpu").idle_slots, 2);
  EXPECT_EQ(m.Count("cuda").idle_slots, 4);
  wa.Assign("job-1", 3, 0);
  EXPECT_EQ(m.Count("cpu").idle, 1);
  EXPECT_EQ(m.AliveAndBusy(), (std::pair<int, int>{3, 1}));
  // What a scheduling pass took already is not offered again.
  std::set<const Member*> taken{m.Idle("cpu", {}).front()};
  EXPECT_TRUE(m.Idle("cpu", taken).empty());
  EXPECT_EQ(m.Count("cpu", taken).idle_slots, 0);
  wa.Free();
  EXPECT_EQ(wa.info.state(), "idle");
  EXPECT_TRUE(wa.info.job_id().empty());
  EXPECT_EQ(m.Idle("cpu", {}).size(), 2u);
}

TEST(MembershipUnitTest, RankProgressComesFromTheHeartbeatsOfThatGeneration) {
  Membership m(Options());
  FakeSession a, b;
  const std::string ida = m.Add(&a, Cpu("h1"), 0).info.id();
  const std::string idb = m.Add(&b, Cpu("h2"), 0).info.id();
  v1::Heartbeat hb;
  hb.set_job_id("job-1");
  hb.set_generation(2);
  auto* r = hb.add_ranks();
  r->set_rank(0);
  r->set_collectives_done(7);
  m.Heartbeat(ida, 10, &hb);
  hb.set_generation(1);  // b still reports the generation before
  hb.mutable_ranks(0)->set_rank(1);
  m.Heartbeat(idb, 10, &hb);
  const auto ranks = m.RankProgressOf("job-1", 2);
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks.at(0).worker, ida);
  EXPECT_EQ(ranks.at(0).collectives_done, 7);
}

TEST(MembershipUnitTest, ListedGpusAreThoseOfTheLastHeartbeat) {
  Membership m(Options());
  FakeSession a;
  const std::string id = m.Add(&a, Cpu("h1"), 0).info.id();
  EXPECT_EQ(m.List()[0].gpus_size(), 0);
  v1::Heartbeat hb;  // no job: the GPUs are kept all the same
  for (int i = 0; i < 2; ++i) {
    v1::GpuStatus* g = hb.add_gpus();
    g->set_index(i);
    g->set_utilization(0.25 * (i + 1));
    g->set_memory_used_bytes(100 + i);
    g->set_memory_total_bytes(1000);
  }
  m.Heartbeat(id, 10, &hb);
  std::vector<v1::Worker> listed = m.List();
  ASSERT_EQ(listed[0].gpus_size(), 2);
  EXPECT_EQ(listed[0].gpus(1).index(), 1);
  EXPECT_EQ(listed[0].gpus(1).utilization(), 0.5);
  EXPECT_EQ(listed[0].gpus(1).memory_used_bytes(), 101);
  EXPECT_EQ(listed[0].gpus(1).memory_total_bytes(), 1000);
  hb.mutable_gpus()->RemoveLast();
  hb.mutable_gpus(0)->clear_utilization();  // a GPU that stopped reporting it
  m.Heartbeat(id, 20, &hb);
  listed = m.List();
  ASSERT_EQ(listed[0].gpus_size(), 1);
  EXPECT_FALSE(listed[0].gpus(0).has_utilization());
  m.Heartbeat(id, 30);  // a liveness-only heartbeat (no message) leaves them as they were
  EXPECT_EQ(m.List()[0].gpus_size(), 1);
}

TEST(MembershipUnitTest, ShardServersAreLiveUntilTheirTimeoutOrCountedOut) {
  Membership m(Options());
  v1::RegisterShardServerRequest r;
  r.set_address("10.0.0.1:7000");
  r.set_data_address("10.0.0.1:7001");
  EXPECT_TRUE(m.RegisterShardServer(r, 0));    // new
  EXPECT_FALSE(m.RegisterShardServer(r, 40));  // a heartbeat
  EXPECT_EQ(m.LiveShardAddresses(90), std::vector<std::string>{"10.0.0.1:7000"});
  EXPECT_TRUE(m.LiveShardAddresses(91).empty());
  EXPECT_TRUE(m.RegisterShardServer(r, 200));  // back after it was counted out
  EXPECT_EQ(m.DataAddressOf("10.0.0.1:7000"), "10.0.0.1:7001");
  EXPECT_EQ(m.DataAddressOf("elsewhere:1"), "");
  EXPECT_TRUE(m.CountOutShardServer("10.0.0.1:7000"));
  EXPECT_FALSE(m.CountOutShardServer("10.0.0.1:7000"));  // already out
  EXPECT_TRUE(m.LiveShardServers(200).empty());
  EXPECT_TRUE(m.RegisterShardServer(r, 210));
}

}  // namespace
}  // namespace gantry::coordinator
