// The coordinator's kill points (common/kill_point.h): in a checkpoint commit, in order, and in
// a preemption. The
// checkpoint becomes visible when the last shard server commits its files; what the
// coordinator records after that is bookkeeping that a restart must not need.
#pragma once

#include "common/kill_point.h"

namespace gantry::coordinator {

extern const KillPoint kCommitBeforeShardCommits;
extern const KillPoint kCommitBetweenShardCommits;
extern const KillPoint kCommitAfterShardCommits;
extern const KillPoint kCommitAfterEvent;
extern const KillPoint kCommitAfterJobUpdate;

// In a preemption (cluster.h), in order. Each is after a durable write: a coordinator that
// dies there and restarts loses no job and places none twice (tests/integration/
// teams_test.sh).
extern const KillPoint kPreemptAfterRequest;
extern const KillPoint kPreemptAfterCheckpoint;
extern const KillPoint kPreemptAfterRelease;

}  // namespace gantry::coordinator
