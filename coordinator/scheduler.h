// The scheduler: places queued jobs on idle workers, first come, first served within a device
// kind, all ranks of a job or none. With team quotas (Options::quotas, coordinator/quota.h) a
// team at its quota or its cap of running jobs waits without holding back other teams, and
// within a priority the team with the lowest dominant share goes first, then age. A pass decides every placement it can, commits them in
// one durable write, then sends the assignments; a placement starts from the resume point the
// committed checkpoints give (the coordinator's record and what the shard servers list). It
// also says how far an elastic job may grow when workers come free.
//
// Thread-compatible: its owner (Cluster) calls it with its own locks held (membership and the
// jobs' read-modify-write); the scheduler takes none, and reaches back only through Host.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "coordinator/auto_placer.h"
#include "coordinator/membership.h"
#include "coordinator/quota.h"
#include "coordinator/spec_cache.h"
#include "coordinator/store.h"
#include "coordinator/watchers.h"
#include "gantry/v1/coordinator.pb.h"
#include "jobspec/job_spec.h"

namespace gantry::coordinator {

class Scheduler {
 public:
  // What the scheduler asks of its owner.
  class Host {
   public:
    virtual ~Host() = default;
    // A job's state change, durable, its watchers told (coordinator/job_state.h checks it).
    virtual absl::Status Transition(v1::Job& job, v1::JobState to, const std::string& message) = 0;
    // Lists the newest whole checkpoints of `jobs` on `servers` off the caller's locks, behind
    // job_id's commits; the answer goes to StoredStepsListed, then a pass runs.
    virtual void ListStoredSteps(const std::string& job_id, int64_t generation, std::vector<std::string> servers,
                                 std::vector<std::string> jobs) = 0;
    // Starts preempting `victim` (its record as read, RUNNING) for `by`, which cannot be placed:
    // durable (Job.preemption), its ranks told to checkpoint and stop; the cluster releases its
    // workers once that checkpoint commits or its grace period ends (coordinator/cluster.h).
    virtual absl::Status Preempt(v1::Job& victim, const v1::Job& by, const std::string& reason) = 0;
  };
  struct Options {
    // After the coordinator starts, jobs are not placed without a shard server for this long.
    int64_t placement_grace_ms = 2500;
    // A restarting job waits up to this long after its failure for the shard servers that
    // hold its last committed checkpoint.
    int64_t checkpoint_server_wait_ms = 30000;
    // parallel: auto jobs are planned on this cluster (the coordinator's --cluster); none:
    // jobspec::DefaultCluster of the workers' device kind (coordinator/auto_placer.h).
    std::optional<jobspec::ClusterSpec> planner_cluster{};
    // The teams' quotas as in force now (the principals file's teams:, reloaded on SIGHUP),
    // read at each pass. Unset, null or empty: no quotas, and placement is as without them.
    std::function<std::shared_ptr<const TeamQuotas>()> quotas{};
  };
  Scheduler(Store* store, Membership* members, SpecCache* specs, Watchers* watchers, metrics::Registry* registry,
            Host* host, Options options, int64_t started_ms);

  // A scheduling pass at now_ms: decide, commit, send.
  void Pass(int64_t now_ms);
  // Whether a pass should run now for time's sake: the start's grace has just passed, or the
  // head of a queue waits for time (a restart's back-off, a shard server's return, a failed
  // write) and the last pass was a second ago.
  bool Due(int64_t now_ms);
  // A lookup that ListStoredSteps started has answered (unreachable: servers that could not
  // be listed; then it runs again at the next due pass).
  void StoredStepsListed(const std::string& job_id, int64_t generation, const std::vector<int64_t>& newest,
                         const std::vector<std::string>& unreachable);
  // The world size a running elastic job should grow to with the idle workers of its kind,
  // or 0: none, or queued jobs of its kind come first.
  int GrowTarget(const v1::Job& job, const jobspec::JobSpec& spec) const;
  // Why a queued parallel: auto job at the head of its queue was not placed at the last pass
  // (empty: it was not, or nothing but the usual wait for workers).
  std::string AutoWaitReason(const std::string& job_id) const;
  // Why the last pass held a queued job for its team's quota or cap (empty: it did not), e.g.
  // "team vision at its quota: 16 of 16 GPUs".
  std::string QuotaHold(const std::string& job_id) const;
  // What the last pass held, per (device kind, team) → why: a team held by its quota or cap
  // holds every queued job of its team at that kind (the pass's walk skips them all), so the
  // holds are the teams', not one entry per job (a pass would otherwise write one for each of
  // thousands of queued jobs). An immutable map, replaced by each pass, that a reader may keep
  // without the owner's locks; HeldFor reads it for one job.
  using QuotaHolds = std::map<std::pair<std::string, std::string>, std::string>;
  std::shared_ptr<const QuotaHolds> quota_holds() const { return quota_holds_; }
  // Why `holds` hold a queued job (empty: they do not), by its device kind and team in `store`.
  static std::string HeldFor(const QuotaHolds& holds, const Store& store, const std::string& job_id);
  // Whether quotas are in force (Options::quotas gives a non-empty set). Reads only the
  // options: callable without the owner's locks.
  bool QuotasInForce() const;
  // The quotas in force now; null: none.
  std::shared_ptr<const TeamQuotas> Quotas() const;
  // What each team has placed now (SCHEDULED and RUNNING jobs; coordinator/quota.h).
  quota::Usage PlacedUse() const;
  // Every queued job's place in its device kind's queue, in the order the passes place them:
  // with quotas the fair share's (quota::FairShareQueue, the walk DecideWithQuotas takes,
  // each job assumed placed in its turn), else the store's (priority, restarting first, age).
  // Job id → (1-based position, the job before it). Reads only the store's index, the spec
  // cache and the options: callable without the owner's locks.
  std::map<std::string, std::pair<int64_t, std::string>> QueuePositions() const;
  // One job's (the walk stops at it): (0, "") if it is not queued.
  std::pair<int64_t, std::string> QueuePosition(const std::string& job_id) const;

  // One job's placement in a pass.
  struct Placement {
    v1::Job job;
    std::vector<std::pair<Member*, int>> chosen;  // rank r runs on chosen[r].first, as its local rank .second
    std::map<Member*, int> local_world;
    std::string where;
    std::pair<std::string, int64_t> resume;
    jobspec::PlacedLayout layout;  // the ranks' layout (Assignment.layout); they read the spec as submitted

    std::vector<v1::ParamRange> param_ranges;
  };

 private:
  // Queued jobs whose spec this coordinator has not read yet join their device kind's queue
  // (one whose stored spec no longer parses fails); lookups of stored steps for jobs no
  // longer queued go.
  void ResolveQueued();
  // The kind's queued jobs as the fair share's queue takes them (the store's index).
  std::vector<quota::FairShareQueue::Job> FairShareJobs(const std::string& device) const;
  std::map<std::string, std::vector<quota::FairShareQueue::Job>> FairShareQueues() const;  // every kind's
  std::vector<Placement> Decide(const std::vector<std::string>& shard_addrs, int64_t now,
                                std::vector<Store::Update>* updates);
  // Decide's walk with quotas: per device kind, quota::FairShareQueue's order (priority, the
  // team of the lowest dominant share, then the queue's order); a team held by its quota or cap
  // waits, with the jobs of its team behind it in that kind, and the others go on.
  std::vector<Placement> DecideWithQuotas(const TeamQuotas& quotas, const std::vector<std::string>& shard_addrs,
                                          int64_t now, std::vector<Store::Update>* updates, QuotaHolds* holds);
  // One queued job, at the head of its kind's queue, on the idle workers not taken yet:
  // placed (*p filled, its update appended), or it waits (and the jobs of its kind behind it
  // with it), or it is skipped (it failed, or its record cannot move; the walk goes on), or
  // it is held: the ranks it would take exceed `room`, what its team's quota leaves of its
  // kind (-1: no limit; an elastic job takes no more than room).
  enum class Outcome { kPlaced, kWaits, kSkipped, kHeld };
  Outcome PlaceOne(v1::Job job, const jobspec::JobSpec& spec, const std::vector<std::string>& shard_addrs, int64_t now,
                   const std::set<const Member*>& taken, Placement* p, std::vector<Store::Update>* updates,
                   int64_t room = -1);
  // The head of a kind's queue waits for workers (wanted_ slots): lower-priority running jobs
  // may be preempted for it (coordinator/preemption.h), unless those being preempted already
  // free enough.
  // quotas and usage (null without quotas): a job within its team's nominal quota may also
  // reclaim the slots its cohort's other teams borrowed, whatever their priority.
  void MaybePreempt(const v1::Job& job, const std::string& device, int64_t need, const std::set<const Member*>& taken,
                    const TeamQuotas* quotas = nullptr, const quota::Usage* usage = nullptr);
  void Send(const std::vector<Placement>& placements, const std::vector<std::string>& shard_addrs, int64_t now);
  // What the shard servers hold of a job (its own newest whole checkpoint and its resume_from
  // job's) is known for its current generation; else the lookup starts, and false.
  bool StoredStepsKnown(const v1::Job& job, const jobspec::JobSpec& spec, const std::vector<std::string>& servers);
  // Where a placement's ranks start: the job's own newest whole checkpoint, else
  // checkpoint.resume_from's; an error names why there is none. "Newest" is the later of what
  // the coordinator recorded at commit and what the shard servers' committed manifests say.
  absl::StatusOr<std::pair<std::string, int64_t>> ResumePoint(const v1::Job& job, const jobspec::JobSpec& spec);

  Store* store_;
  Membership* members_;
  SpecCache* specs_;
  Watchers* watchers_;
  metrics::Registry* registry_;
  Host* host_;
  const Options options_;
  const int64_t started_ms_;
  bool grace_over_ = false;  // placement_grace_ms has passed since the start
  int64_t last_pass_ms_ = 0;
  bool timed_wait_ = false;  // the head of a queue waits for time to pass
  struct StoredSteps {
    int64_t generation = -1;
    bool done = false;
    int64_t own = 0, from = 0;
  };
  std::map<std::string, StoredSteps> stored_;  // job id → its lookup, for the placement it serves
  AutoPlacer auto_placer_;                      // parallel: auto jobs' workers and layout
  std::map<std::string, std::string> auto_waits_;  // job id → why its last pass did not place it
  std::shared_ptr<const QuotaHolds> quota_holds_ = std::make_shared<const QuotaHolds>();  // the last pass's holds
  // Set by PlaceOne when the job waits for workers alone: the slots it needs (0: it waits for
  // something else, or was placed).
  int64_t wanted_ = 0;
};

}  // namespace gantry::coordinator
