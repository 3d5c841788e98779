#include "coordinator/kill_points.h"

namespace gantry::coordinator {

const KillPoint kCommitBeforeShardCommits("coordinator.commit.before_shard_commits", KillPoint::kBeforeCommit,
                                          "every rank reported its part durable; no shard server has committed");
const KillPoint kCommitBetweenShardCommits("coordinator.commit.between_shard_commits", KillPoint::kBeforeCommit,
                                           "a shard server committed its files, another has not (reached after "
                                           "each commit but the last): the checkpoint is not whole");
const KillPoint kCommitAfterShardCommits("coordinator.commit.after_shard_commits", KillPoint::kAfterCommit,
                                         "every shard server committed; the commit event is not recorded");
const KillPoint kCommitAfterEvent("coordinator.commit.after_event", KillPoint::kAfterCommit,
                                  "the commit event is recorded; the job's checkpoint step is not updated");
const KillPoint kCommitAfterJobUpdate("coordinator.commit.after_job_update", KillPoint::kAfterCommit,
                                      "the job records the checkpoint step and servers; checkpoint.keep has not "
                                      "deleted older checkpoints");

const KillPoint kPreemptAfterRequest("coordinator.preempt.after_request", KillPoint::kAfterCommit,
                                     "the victim's record says it is being preempted; its ranks are not told yet");
const KillPoint kPreemptAfterCheckpoint("coordinator.preempt.after_checkpoint", KillPoint::kAfterCommit,
                                        "the victim's checkpoint is committed and recorded; its workers are not "
                                        "released");
const KillPoint kPreemptAfterRelease("coordinator.preempt.after_release", KillPoint::kAfterCommit,
                                     "the victim is PREEMPTED and its workers are free; the job that preempted it "
                                     "is not placed yet");

}  // namespace gantry::coordinator
