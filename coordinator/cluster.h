// The coordinator's live state, behind one façade for the service: membership (workers by
// heartbeat, shard servers: membership.h), the scheduler (FIFO gang placement: scheduler.h),
// watchers, the spec cache, stall detection, and the job state changes that workers report.
// Durable job state goes through Store; membership is soft state that workers rebuild by
// re-attaching. Locks: mu_ (membership, scheduler, stalls), then job_mu_ (a job's
// read-modify-write); the collaborators take none of these and are lent none.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/metrics.h"
#include "coordinator/checkpoint_commit.h"
#include "coordinator/membership.h"
#include "coordinator/rendezvous.h"
#include "coordinator/scheduler.h"
#include "coordinator/spec_cache.h"
#include "coordinator/stalls.h"
#include "coordinator/store.h"
#include "coordinator/watchers.h"
#include "gantry/v1/coordinator.pb.h"
#include "jobspec/job_spec.h"

namespace gantry::coordinator {

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
  // The cluster parallel: auto jobs are planned on (--cluster); none: a default of the
  // workers' device kind (coordinator/auto_placer.h).
  std::optional<jobspec::ClusterSpec> planner_cluster;
  // A running job whose next step has not come for max(this, 10 x its last step time) is
  // stalled: the coordinator names the ranks behind (by their last completed collective).
  int64_t stall_ms = 60000;
  // The teams' quotas as in force now (the principals file's teams:; Scheduler::Options).
  std::function<std::shared_ptr<const TeamQuotas>()> quotas;
  // How long a preempted job has to checkpoint before it is stopped without (its spec's
  // scheduling.preemption_grace_s overrides it; the coordinator's --preemption_grace_s).
  int64_t preemption_grace_ms = 120000;
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
  // is after. NOT_FOUND for an unknown job. by: who cancelled it (Principal::Describe), in its
  // reason and its events.
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, const std::string& by = "the user");
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
  using WorkerCounts = Membership::Counts;
  WorkerCounts CountWorkers(const std::string& device);

  // The shard servers of job's last committed checkpoint that are not live now, while the
  // job should still wait for them (empty: place it).
  std::vector<std::string> MissingCheckpointServers(const v1::Job& job);
  // Why a queued parallel: auto job was not placed at the last pass (empty: nothing to add
  // to the usual wait for workers).
  std::string AutoWaitReason(const std::string& job_id);
  // Why the last pass held a queued job for its team's quota or cap (empty: it did not).
  std::string QuotaHold(const std::string& job_id);
  // Neither takes mu_ (a listing's waiting_for does not wait for a pass).
  bool QuotasInForce();
  // A queued job's place in its device kind's queue, in the order the scheduler places them
  // (Scheduler::QueuePositions: with quotas the fair share's), and the job before it: (0, "")
  // if it is not queued. QueuePositions: every queued job's, for a listing. Neither takes mu_.
  std::pair<int64_t, std::string> QueuePosition(const std::string& job_id);
  std::map<std::string, std::pair<int64_t, std::string>> QueuePositions();
  // Whether a job of `team` with scheduling.preemptible: false needing `want` slots of
  // `device` may be submitted: FAILED_PRECONDITION naming the quota if not (quota.h's rule;
  // with no quotas in force, any is). Takes no lock of the cluster's.
  absl::Status AdmitNotPreemptible(const std::string& team, const std::string& device, int64_t want);
  // Every team's quota, use and queued jobs (GetQuotas): the teams the quotas name and those
  // with placed or queued jobs, by name.
  v1::GetQuotasResponse QuotaReport();

  // Rendezvous store of a job generation (NCCL unique ids, Gloo addresses). Keys live until
  // the job leaves its placement. A Put or Get naming another generation than the job's
  // current one is FAILED_PRECONDITION (a stale worker). Get waits up to wait_ms for the
  // key; done is called exactly once, possibly on another thread.
  absl::Status RendezvousPut(const std::string& job_id, int64_t generation, const std::string& key,
                             const std::string& value);
  void RendezvousGet(const std::string& job_id, int64_t generation, const std::string& key, int64_t wait_ms,
                     std::function<void(absl::StatusOr<std::string>)> done);

  // A job's spec, parsed once per coordinator (coordinator/spec_cache.h): at submit
  // (ParseSpec, then RememberSpec as the store creates the job), or the first time a job
  // stored by an earlier coordinator is looked at (SpecOf). SpecOf: null if the stored text
  // does not parse (it did when the job was accepted).
  absl::StatusOr<std::shared_ptr<const jobspec::JobSpec>> ParseSpec(const std::string& yaml) { return specs_.Parse(yaml); }
  void RememberSpec(const std::string& job_id, std::shared_ptr<const jobspec::JobSpec> spec);
  std::shared_ptr<const jobspec::JobSpec> SpecOf(const v1::Job& job);

  void RegisterShardServer(const v1::RegisterShardServerRequest& r);
  std::vector<v1::ShardServerInfo> ShardServers();

  // Waits until the checkpoint commits and resume lookups queued or in flight, and what
  // waits behind them (a job's end, and the scheduling pass it asked for), have run (tests).
  void WaitForCommits();

 private:
  void CheckStallsLocked(int64_t now);
  // Whether (job, generation) may use the rendezvous store: the job is placed at that
  // generation (a failure report also after it left its placement).
  absl::Status CheckGeneration(const std::string& job_id, int64_t generation, const std::string& key);
  // A scheduling pass (mu_ held; takes job_mu_): the scheduler's, then the gauges.
  void ScheduleLocked();
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
  // Preemption (docs/operations.md "Preemption"). Starts it (the scheduler's Host::Preempt;
  // mu_ and job_mu_ held): the victim's record notes it (durable), its ranks are told to
  // checkpoint after a step a little ahead and stop, and its deadline is kept.
  absl::Status StartPreemptionLocked(v1::Job& victim, const v1::Job& by, const std::string& reason);
  // Ends it (mu_ held; takes job_mu_): the victim of (job, generation), still placed and being
  // preempted, releases its workers and goes PREEMPTED, `how` saying where it resumes from.
  // False when there was nothing to release.
  bool ReleasePreemptedLocked(const std::string& job_id, int64_t generation, const std::string& how);
  // Rank 0 of (job, generation) reported `step`, past its preemption's stop step (the message
  // came too late): a later stop step is set and sent. Takes mu_ and job_mu_.
  void PreemptionMissed(const std::string& job_id, int64_t generation, int64_t step);
  // The release itself, on the job's record as read (mu_ and job_mu_ held).
  bool ReleaseJobLocked(v1::Job& job, const std::string& how);
  // Preemptions past their deadline are released (mu_ held).
  void CheckPreemptionsLocked(int64_t now);
  // A rank's end of job, applied (OnDone defers it behind the job's commits).
  void ApplyDone(const std::string& id, const v1::JobDone& d);
  // A commit ended (on the committer's executor): its event, the job's record, growth.
  void CheckpointEnded(const CheckpointCommitter::Checkpoint& c, const absl::StatusOr<std::vector<std::string>>& servers);
  void Monitor();
  // With force (the monitor's round every 100 ms, a cancel, the start) also the per-team
  // series: UpdateTeamGaugesLocked.
  void UpdateGaugesLocked(bool force = false);
  int64_t gauges_ms_ = 0;  // when UpdateGaugesLocked last ran (mu_)
  // gantry_coordinator_team_* from quota::Figures: per team (the quotas' and those with placed
  // or queued jobs; "(none)" for jobs without a team) and device kind. A series no longer
  // reported (a team gone, a quota dropped by a reload) leaves the page.
  void UpdateTeamGaugesLocked(int64_t now);
  std::set<std::pair<std::string, metrics::Labels>> team_series_;  // exported at the last update (mu_)
  absl::Status Event(const std::string& job_id, std::function<void(v1::JobEvent&)> fill, bool sync = true);

  Store* store_;
  metrics::Registry* registry_;
  ClusterOptions options_;
  std::mutex job_mu_;  // job read-modify-write (service and cluster)
  std::mutex mu_;      // membership; taken before job_mu_ where both are needed
  Membership members_;  // workers and shard servers (under mu_; Heartbeat and LargestMemory from any thread)
  std::map<std::pair<std::string, int64_t>, std::set<int>> done_ranks_;  // (job, generation) → ranks done
  Watchers watchers_;  // the WatchJob streams (its own lock)
  SpecCache specs_;    // each job's parsed spec (its own lock)
  StallDetector stalls_;  // under mu_
  // Jobs being preempted: job id → (generation, deadline). Under mu_.
  std::map<std::string, std::pair<int64_t, int64_t>> preempting_;
  Rendezvous rendezvous_;
  bool stop_ = false;
  std::condition_variable cv_;
  std::thread monitor_;
  std::mutex schedule_mu_;  // RequestSchedule's flag, apart from mu_ (which a pass holds)
  std::condition_variable schedule_cv_;
  bool schedule_requested_ = false, schedule_stop_ = false;
  bool scheduling_ = false;  // a requested pass runs
  std::thread pass_thread_;
  // Checkpoints being assembled: (job, generation, step) → the parts reported so far.
  struct PendingCheckpoint {
    std::set<int> ranks;
    CheckpointCommitter::Checkpoint checkpoint;
  };
  std::map<std::tuple<std::string, int64_t, int64_t>, PendingCheckpoint> pending_ckpt_;  // under job_mu_
  std::unique_ptr<CheckpointCommitter> commits_;
  // The scheduler reaches back through this: a job's transition, a lookup of stored steps
  // on the committer whose answer re-enters under mu_.
  class SchedulerHost : public Scheduler::Host {
   public:
    explicit SchedulerHost(Cluster* c) : c_(c) {}
    absl::Status Transition(v1::Job& job, v1::JobState to, const std::string& message) override;
    void ListStoredSteps(const std::string& job_id, int64_t generation, std::vector<std::string> servers,
                         std::vector<std::string> jobs) override;
    absl::Status Preempt(v1::Job& victim, const v1::Job& by, const std::string& reason) override;

   private:
    Cluster* c_;
  };
  SchedulerHost scheduler_host_{this};
  // The last pass's quota holds (Scheduler::quota_holds), for the service's waiting_for
  // without mu_ (which a pass holds): published after each pass.
  std::mutex holds_mu_;
  std::shared_ptr<const Scheduler::QuotaHolds> holds_ = std::make_shared<const Scheduler::QuotaHolds>();
  Scheduler scheduler_;  // under mu_ and job_mu_
};

}  // namespace gantry::coordinator
