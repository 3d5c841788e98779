// The coordinator's live state: worker membership (by heartbeat), shard servers, FIFO gang
// placement of pending jobs, and the job state changes that workers report. Durable job
// state goes through Store; membership is soft state that workers rebuild by re-attaching.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/metrics.h"
#include "coordinator/checkpoint_commit.h"
#include "coordinator/rendezvous.h"
#include "coordinator/spec_cache.h"
#include "coordinator/stalls.h"
#include "coordinator/store.h"
#include "coordinator/watchers.h"
#include "gantry/v1/coordinator.pb.h"
#include "jobspec/job_spec.h"

namespace gantry::coordinator {

// A worker's attach stream, as the cluster sees it.
class WorkerSession {
 public:
  virtual ~WorkerSession() = default;
  virtual void Send(const v1::CoordinatorMessage& m) = 0;
  // The cluster counted the worker out while its stream stayed open (it fell silent: a
  // stopped process, a stalled host): the stream ends, so that the worker, should it come
  // back, attaches again as a new worker rather than heartbeat on a stream nobody assigns
  // work to. Called once, with the cluster's lock held; never calls into the cluster.
  virtual void End(const std::string& why) {}
  // Whether messages the worker sent wait, read but not yet applied: its silence is then the
  // coordinator's own (its heartbeats are not read while the backlog is full), not the
  // worker's, and it is not counted out. Called with the cluster's lock held.
  virtual bool Backlogged() { return false; }
};

struct ClusterOptions {
  int64_t worker_timeout_ms = 5000;  // a worker silent this long is dead
  // A dead worker stays listed (`gantry workers`, state dead) this long, then its record goes:
  // a worker that re-attaches does so under a new id, so without this a cluster whose workers
  // come and go would keep every id it ever gave out.
  int64_t dead_worker_retention_ms = 600000;
  int64_t shard_timeout_ms = 5000;
  // After the coordinator starts, jobs are not placed without a shard server for this long:
  // after a restart the shard servers re-register within a heartbeat, and a job placed
  // before that would neither find its checkpoints nor write new ones.
  int64_t placement_grace_ms = 2500;
  // A restarting job waits up to this long after its failure for the shard servers that hold
  // its last committed checkpoint (a shard server restarting, or re-registering after a
  // coordinator restart); then it is placed anyway and resumes from what the live servers
  // hold whole.
  int64_t checkpoint_server_wait_ms = 30000;
  // A running job whose next step has not come for max(this, 10 x its last step time) is
  // stalled: the coordinator names the ranks behind (by their last completed collective).
  int64_t stall_ms = 60000;
  // Deadlines of the commit, listing and delete calls to the shard servers.
  shardserver::ShardDeadlines shard_deadlines{};
};

class Cluster {
 public:
  Cluster(Store* store, metrics::Registry* registry, ClusterOptions options);
  ~Cluster();

  // At start: jobs left SCHEDULED or RUNNING by a previous coordinator go RESTARTING: placed
  // again once workers re-attach, from their last committed checkpoint.
  absl::Status Recover();

  // Job API hooks.
  // A job was queued: places what it can now (tests), or soon on the cluster's scheduling
  // thread without waiting (RequestSchedule: the service, so that SubmitJob answers after its
  // own write, and a burst of submissions is placed in few passes).
  void JobSubmitted();
  void RequestSchedule();
  // Cancels a job that has not ended (CANCELLED, its workers freed at once); the record as it
  // is after. NOT_FOUND for an unknown job.
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id);
  // Appends an event and wakes the watchers of its job.
  absl::Status AddEvent(v1::JobEvent e, bool sync = true);
  // Every state change of a job: coordinator/job_state.h (checked; the record and its events
  // stored in one batch, synced unless `sync` is false).
  absl::Status Transition(v1::Job& job, v1::JobState to, const std::string& message = "", bool sync = true);
  // Watchers of a job: fn is called (without the cluster's locks held) after each event of
  // that job. Once Unsubscribe returns, fn is not running and will not run again, so its
  // watcher may be deleted.
  int Subscribe(const std::string& job_id, std::function<void()> fn);
  void Unsubscribe(int id);

  // Worker sessions.
  std::string AddWorker(WorkerSession* s, const v1::Resources& r);
  // Takes no lock that placement or a job's writes hold: a heartbeat is never queued behind
  // them (a worker that waited would be counted out).
  void Heartbeat(const std::string& id, const v1::Heartbeat* hb = nullptr);
  void OnStep(const std::string& id, const v1::StepUpdate& u);
  void OnDone(const std::string& id, const v1::JobDone& d);
  // A rank's checkpoint part is durable; the checkpoint is committed on the shard server
  // once every rank of the generation has reported that step. Returns at once: the commit
  // runs on the CheckpointCommitter, and the job's end (OnDone, or a lost worker's) is
  // applied after it.
  void OnCheckpointPart(const std::string& id, const v1::CheckpointPart& p);
  // end_stream: the worker is counted out while its stream is open (a heartbeat timeout).
  void RemoveWorker(const std::string& id, const std::string& why, bool end_stream = false);
  std::vector<v1::Worker> Workers();
  // The memory of the largest live worker (0: none), without copying every worker's record.
  int64_t LargestWorkerMemory();
  // Live workers offering a device kind: attached, idle, and the ranks the idle ones host.
  struct WorkerCounts {
    int alive = 0, idle = 0, idle_slots = 0;
  };
  WorkerCounts CountWorkers(const std::string& device);

  // The shard servers of job's last committed checkpoint that are not live now, while the
  // job should still wait for them (empty: place it).
  std::vector<std::string> MissingCheckpointServers(const v1::Job& job);

  // Rendezvous store of a job generation (NCCL unique ids, Gloo addresses). Keys live until
  // the job leaves its placement. A Put or Get naming another generation than the job's
  // current one is FAILED_PRECONDITION (a stale worker). Get waits up to wait_ms for the
  // key; done is called exactly once, possibly on another thread.
  absl::Status RendezvousPut(const std::string& job_id, int64_t generation, const std::string& key,
                             const std::string& value);
  void RendezvousGet(const std::string& job_id, int64_t generation, const std::string& key, int64_t wait_ms,
                     std::function<void(absl::StatusOr<std::string>)> done);

  // A job's spec, parsed once per coordinator: at submit (Remember), or the first time a job
  // stored by an earlier coordinator is looked at. Null if the stored text does not parse
  // (it did when the job was accepted).
  void RememberSpec(const std::string& job_id, jobspec::JobSpec spec);
  std::shared_ptr<const jobspec::JobSpec> SpecOf(const v1::Job& job);

  void RegisterShardServer(const v1::RegisterShardServerRequest& r);
  std::vector<v1::ShardServerInfo> ShardServers();

  // Waits until the checkpoint commits and resume lookups queued or in flight, and what
  // waits behind them (a job's end, and the scheduling pass it asked for), have run (tests).
  void WaitForCommits();

 private:
  // What heartbeats update: apart from the membership under mu_, so that a heartbeat takes
  // only live_mu_ (shared) and this entry's own lock.
  struct Liveness {
    std::atomic<int64_t> last_seen_ms{0};
    std::mutex mu;
    v1::Heartbeat last_hb;  // the last heartbeat that named a job (mu)
  };
  struct WorkerState {
    v1::Worker info;  // its last_heartbeat_unix_ms is live->last_seen_ms, filled when listed
    WorkerSession* session = nullptr;
    std::shared_ptr<Liveness> live;
    int64_t generation = 0;  // of the job assignment it runs (info.job_id)
    int64_t dead_since_ms = 0;  // when it was counted out (state dead); 0 while attached
    std::set<int> running;   // the ranks of it not done yet (busy while any is)
    // The worker runs no job any more (its job threads may still be ending: the worker
    // joins them before it starts the next assignment).
    void Free() {
      info.set_state("idle");
      info.clear_job_id();
      info.clear_ranks();
      running.clear();
    }
  };
  // Attached, not heard from for worker_timeout_ms, and not waiting on the coordinator's own
  // backlog of its messages (cluster mu_ held).
  bool SilentLocked(const WorkerState& w, int64_t now);
  // Erases the records of workers dead for dead_worker_retention_ms (cluster mu_ held).
  void ForgetDeadLocked(int64_t now);
  void CheckStallsLocked(int64_t now);
  // Whether (job, generation) may use the rendezvous store: the job is placed at that
  // generation (a failure report also after it left its placement).
  absl::Status CheckGeneration(const std::string& job_id, int64_t generation, const std::string& key);
  // A scheduling pass (cluster mu_ held): decide each queued job's placement (first come,
  // first served within a device kind; all ranks or none), commit them in one durable write,
  // send the assignments.
  void ScheduleLocked();
  // One job's placement in a pass.
  struct Placement {
    v1::Job job;
    std::vector<std::pair<WorkerState*, int>> chosen;  // rank r runs on chosen[r].first, as its local rank .second
    std::map<WorkerState*, int> local_world;
    std::string yaml, where;
    std::pair<std::string, int64_t> resume;
    int dp = 1, tp = 1, pp = 1;
    std::vector<v1::ParamRange> param_ranges;
  };
  std::vector<std::string> LiveShardServersLocked(int64_t now) const;
  // Queued jobs whose spec this coordinator has not read yet join their device kind's queue
  // (one whose stored spec no longer parses fails); lookups of stored steps for jobs no longer
  // queued go.
  void ResolveQueuedLocked();
  std::vector<Placement> DecideLocked(const std::vector<std::string>& shard_addrs, int64_t now,
                                      std::vector<Store::Update>* updates);
  void SendLocked(const std::vector<Placement>& placements, const std::vector<std::string>& shard_addrs, int64_t now);
  // A cancelled job's placement ends: its rendezvous keys go, its workers are told and freed.
  void JobCancelled(const v1::Job& job);
  // A message of (job, generation) came from worker id though that generation is over: unless
  // the worker runs the job's current generation (a late message of its old job thread), it
  // is told to drop the job. Takes mu_.
  void DropIfStale(const std::string& id, const std::string& job_id, int64_t generation);
  // The placement (job, generation) is over because of `why`: the other ranks drop it. With
  // `retryable` and restarts left the job goes RESTARTING (placed again, from its last
  // committed checkpoint), else FAILED. No-op unless the job is SCHEDULED or RUNNING at that
  // generation. Cluster mu_ held.
  // `planned` (an elastic job growing): placed again whatever max_restarts says, and not
  // counted as a restart.
  void EndPlacementLocked(const std::string& job_id, int64_t generation, const std::string& why, bool retryable,
                          bool planned = false);
  // After a commit: an elastic job below its largest dp that idle workers could now fill is
  // placed again, bigger, from the checkpoint just committed. Takes mu_.
  void MaybeGrow(const std::string& job_id, int64_t generation, int64_t step);
  // A rank's end of job, applied (OnDone defers it behind the job's commits).
  void ApplyDone(const std::string& id, const v1::JobDone& d);
  // A commit ended (on the committer's executor): its event, the job's record, growth.
  void CheckpointEnded(const CheckpointCommitter::Checkpoint& c, const absl::StatusOr<std::vector<std::string>>& servers);
  int IdleSlotsLocked(const std::string& device) const;  // ranks the idle workers offering that device kind can host
  void Monitor();
  void UpdateGaugesLocked(bool force = false);
  int64_t gauges_ms_ = 0;  // when UpdateGaugesLocked last ran (mu_)
  absl::Status Event(const std::string& job_id, std::function<void(v1::JobEvent&)> fill, bool sync = true);

  Store* store_;
  metrics::Registry* registry_;
  ClusterOptions options_;
  std::mutex job_mu_;  // job read-modify-write (service and cluster)
  std::mutex mu_;      // membership; taken before job_mu_ where both are needed
  std::map<std::string, WorkerState> workers_;
  std::atomic<int64_t> largest_memory_{0};  // LargestWorkerMemory, kept by AddWorker and RemoveWorker
  void UpdateLargestLocked();
  std::shared_mutex live_mu_;  // live_ (taken inside mu_ by AddWorker)
  std::map<std::string, std::shared_ptr<Liveness>> live_;  // worker id → its Liveness, as workers_
  std::map<std::string, v1::ShardServerInfo> shards_;
  std::map<std::pair<std::string, int64_t>, std::set<int>> done_ranks_;  // (job, generation) → ranks done
  int64_t next_worker_ = 1;
  Watchers watchers_;  // the WatchJob streams (its own lock)
  SpecCache specs_;    // each job's parsed spec (its own lock)
  StallDetector stalls_;  // under mu_
  // Where a placement's ranks start (Assignment.resume_job_id, resume_step): the job's own
  // newest whole checkpoint, else checkpoint.resume_from's; an error names why there is
  // none. "Newest" is the later of what the coordinator recorded at commit and what the
  // shard servers' committed manifests say (a commit can be durable on the servers though
  // the coordinator never heard it: a server or the coordinator died in between). mu_ and
  // job_mu_ held.
  absl::StatusOr<std::pair<std::string, int64_t>> ResumePointLocked(const v1::Job& job, const jobspec::JobSpec& spec);
  // The shard servers' newest whole checkpoints of a job (own) and of its resume_from job
  // (from), listed on the committer (behind the job's commits) before the job is placed
  // again (generation: the one the lookup was for). StoredStepsKnownLocked starts the lookup when it is not known yet;
  // its end places queued jobs. mu_ held.
  struct StoredSteps {
    int64_t generation = -1;
    bool done = false;
    int64_t own = 0, from = 0;
  };
  bool StoredStepsKnownLocked(const v1::Job& job, const jobspec::JobSpec& spec, const std::vector<std::string>& servers);
  std::map<std::string, StoredSteps> stored_;  // under mu_
  Rendezvous rendezvous_;
  bool stop_ = false;
  const int64_t started_ms_;
  bool grace_over_ = false;  // placement_grace_ms has passed since the start
  int64_t last_schedule_ms_ = 0;
  bool timed_wait_ = false;  // the head of the queue waits for time to pass (a back-off, a server's return)
  std::condition_variable cv_;
  std::thread monitor_;
  std::mutex schedule_mu_;  // RequestSchedule's flag, apart from mu_ (which a pass holds)
  std::condition_variable schedule_cv_;
  bool schedule_requested_ = false, schedule_stop_ = false;
  bool scheduling_ = false;  // a requested pass runs
  std::thread scheduler_;
  // Checkpoints being assembled: (job, generation, step) → the parts reported so far.
  struct PendingCheckpoint {
    std::set<int> ranks;
    CheckpointCommitter::Checkpoint checkpoint;
  };
  std::map<std::tuple<std::string, int64_t, int64_t>, PendingCheckpoint> pending_ckpt_;  // under job_mu_
  std::unique_ptr<CheckpointCommitter> commits_;
};

}  // namespace gantry::coordinator
