// Checkpoint commits, and the listings a job's placement waits for, off the coordinator's
// reactors. Once every rank of a job's generation
// has reported its part of a step (Cluster::OnCheckpointPart), the checkpoint is committed
// here: on every shard server that holds files of it, one after another; then
// checkpoint.keep prunes the job's older checkpoints (every live server listed at once, the
// old ones deleted).
//
// Nothing here blocks its caller. The shard-server calls go out on one long-lived channel
// per server (shardserver::ShardClients) with deadlines sized to the work, their answers come back
// on gRPC's threads, and what follows an answer (the job's events and record, through the
// Committed callback) runs on this class's executor.
//
// Order: one job's work runs one item after another. Its commits run in the order their
// last parts came, and After() queues work behind them that must see them finished: a
// rank's end of job (so that a job SUCCEEDS only after its last checkpoint is committed)
// and a lost worker's end of its placement (so that the job restarts from that checkpoint).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/executor.h"
#include "shardserver/client/shard_client.h"

namespace gantry::coordinator {

class CheckpointCommitter {
 public:
  // A checkpoint whose parts are all durable on the shard servers, not committed yet.
  struct Checkpoint {
    std::string job_id;
    int64_t generation = 0;
    int64_t step = 0;
    std::map<std::string, std::vector<std::string>> files;  // shard server → the files it holds
    std::string manifest_json;
    shardserver::CheckpointOwner owner;  // the job's owner and team, committed with it
    int64_t bytes = 0;
    int keep = 0;          // checkpoint.keep: the newest this many whole ones stay (0: all)
    bool elastic = false;  // the job may grow once it is committed (Cluster::MaybeGrow)
  };
  // The commit ended: the servers it was committed on, or why it was not (the commits that
  // did land are deleted again first). Runs on the executor, in the job's order, before the
  // job's next item; it may take the cluster's locks and write the store.
  using Committed = std::function<void(const Checkpoint& c, const absl::StatusOr<std::vector<std::string>>& servers)>;
  // The shard servers live now (those checkpoint.keep lists and prunes).
  using LiveServers = std::function<std::vector<std::string>()>;

  CheckpointCommitter(shardserver::ShardDeadlines deadlines, LiveServers live, Committed committed);
  // Waits for the work queued and in flight (every call has a deadline).
  ~CheckpointCommitter();

  // Queues the commit of c behind its job's earlier work; returns at once.
  void Commit(Checkpoint c);
  // With work of job_id queued or running: queues fn behind it and returns true. Otherwise
  // returns false and queues nothing: the caller runs fn's work itself, now.
  bool After(const std::string& job_id, std::function<void()> fn);
  // The newest whole checkpoint's step (0: none) of each of `jobs` over servers, every
  // server listed at once, and the servers that could not be listed, each with why. Queued
  // behind job_id's commits, so that a job placed again after a commit sees it. `done` runs
  // on the executor, in job_id's order.
  using NewestListed = std::function<void(std::vector<int64_t> newest, std::vector<std::string> unreachable)>;
  void ListNewest(const std::string& job_id, std::vector<std::string> servers, std::vector<std::string> jobs,
                  NewestListed done);
  // Waits until no job has work queued or running (tests; shutdown).
  void Drain();

 private:
  using Ptr = std::shared_ptr<const Checkpoint>;
  void CommitOnServers(Ptr c, std::function<void()> done);
  // Commits on servers[i], and on the next once it has answered: one server after another
  // in address order, as the inline commit did, and the first refusal stops the rest.
  void CommitFrom(Ptr c, std::shared_ptr<const std::vector<std::string>> servers, size_t i,
                  std::vector<std::string> committed, std::function<void()> done);
  // On the executor: the servers committed on, and the error that stopped the commit.
  void Ended(Ptr c, std::vector<std::string> committed, absl::Status error, std::function<void()> done);
  void Prune(Ptr c, std::function<void()> done);
  // Deletes job's checkpoints (server, step), all at once; `then` runs on the executor once
  // every server has answered (a failure is logged: the checkpoint stays, as before).
  void Delete(const std::vector<std::pair<std::string, int64_t>>& targets, const std::string& job_id,
              std::function<void()> then);

  shardserver::ShardClients clients_;
  LiveServers live_;
  Committed committed_;
  Executor executor_;
  SerialQueues jobs_;
};

}  // namespace gantry::coordinator
