// The control-plane load test (bench/load/control_plane.h) scaled down for CI: 100 workers
// and 1,000 jobs against a real gantry-coordinator and two real gantry-shardservers, the
// coordinator SIGKILLed and restarted half way; and 8 concurrent checkpoint streams of 2 MB
// against a real shard server. What must hold whatever the machine's speed: no job lost or
// placed twice, every checkpoint committed with its bytes as written, every worker
// re-attached after the restart and the interrupted jobs going on. Latencies and rates are
// printed, not asserted (bench/control_plane_load measures them at full scale).
#include <gtest/gtest.h>

#include <cstdio>

#include "absl/strings/str_join.h"
#include "bench/load/control_plane.h"
#include "bench/load/shard_streams.h"

namespace gantry::load {
namespace {

TEST(ControlPlaneLoadTest, NoJobIsLostOrPlacedTwiceAndWorkersReattachAfterARestart) {
  ControlPlaneOptions o;
  o.workers = 100;
  o.jobs = 1000;
  o.shard_servers = 2;
  o.submit_rate = 250;
  o.steps = 4;
  o.checkpoint_every = 2;
  o.step_ms = 20;
  o.watchers = 8;
  o.list_jobs_period_s = 0.25;
  o.restart_at = 0.5;  // jobs are running and queued when the coordinator dies
  o.verify_jobs = -1;  // every checkpoint read back
  o.coordinator_bin = GANTRY_COORDINATOR_BIN;
  o.shardserver_bin = GANTRY_SHARDSERVER_BIN;
  auto r = RunControlPlaneLoad(o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("%s", FormatReport(*r).c_str());
  EXPECT_TRUE(r->violations.empty()) << absl::StrJoin(r->violations, "\n");
  EXPECT_EQ(r->jobs_submitted, o.jobs);
  EXPECT_EQ(r->jobs_succeeded, o.jobs) << "every job SUCCEEDED with all its steps and its last checkpoint";
  EXPECT_EQ(r->checkpoints_committed, 2 * o.jobs) << "steps 2 and 4 of every job, whole on the shard servers";
  EXPECT_EQ(r->checkpoints_verified, 2 * o.jobs);
  EXPECT_GT(r->watched_jobs, 0);
  ASSERT_TRUE(r->restarted);
  // RunControlPlaneLoad fails unless every worker re-attached and every interrupted job
  // stepped again (within 120 s); the bound here is loose for a loaded CI machine, the
  // benchmark's target (10 s at 1,000 workers) is printed above.
  EXPECT_LT(r->reattached_s, 60);
  EXPECT_GT(r->interrupted_jobs, 0) << "the restart came while jobs ran";
}

TEST(ShardServerLoadTest, ConcurrentStreamsAllCommitAndReadBackIdentical) {
  ShardStreamOptions o;
  o.streams = 8;
  o.bytes = 2 << 20;
  o.shardserver_bin = GANTRY_SHARDSERVER_BIN;
  auto r = RunShardStreams(o);
  ASSERT_TRUE(r.ok()) << r.status();
  std::printf("%s", FormatReport(*r).c_str());
  EXPECT_TRUE(r->errors.empty()) << absl::StrJoin(r->errors, "\n");
  EXPECT_EQ(r->committed, o.streams);
  EXPECT_EQ(r->bytes_verified, 2 * o.bytes * o.streams) << "both phases' checkpoints, every byte";
}

}  // namespace
}  // namespace gantry::load
