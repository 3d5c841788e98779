// Team quotas in the scheduler (issue 50 item 3): what each team has placed, its dominant
// share of use over quota, and why a queued job of a team at its quota waits. Functions of
// the state they read (no locks, no I/O), as placement.h's; the quotas themselves come from
// the principals file's teams: section (common/principals.h, TeamQuota).
//
// A job's use is its placed ranks (one GPU each on a cuda kind, one cpu worker each on cpu)
// while it is SCHEDULED or RUNNING; a job counts for its record's team (the submitter's).
// A team that the quotas do not name, a job without a team, and a device kind that a team's
// quota does not name are not limited.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/principals.h"
#include "coordinator/placement.h"

namespace gantry::coordinator::quota {

// What one team has placed now.
struct Use {
  std::map<std::string, int64_t> slots;  // device kind -> placed ranks
  int64_t jobs = 0;                      // placed jobs, all kinds
};
using Usage = std::map<std::string, Use>;  // by team

// "GPU"/"GPUs" on a cuda kind ("cuda-emulated GPUs" on the emulator), "cpu slot(s)" on cpu.
std::string SlotsName(const std::string& device, int64_t n);

// The team's dominant share: the largest use / nominal over the kinds its quota gives more
// than 0 of (Ghodsi et al.'s dominant resource, with the quota as the capacity); 0 for a team
// without a quota. A team at its quota of its scarcest kind has 1.
double DominantShare(const TeamQuotas& quotas, const Usage& usage, const std::string& team);

// The queue's order with quotas, in one place: the scheduler places jobs in it, and
// queue_position reports it. Within a device kind: the highest priority among the teams'
// next jobs; within a priority the team of the lowest dominant share (DominantShare, as it
// stands with the jobs taken before); then the queue's own order (placement::QueueKey: a
// restarting or preempted job first, then age). A team's own jobs keep the queue's order.
// Shares move as jobs are placed (Placed). Single-threaded; it owns its copy of the use.
// A step costs a comparison per team with a job left: each team's share is kept, and only the
// placed team's is worked out again (queue_position walks thousands of jobs per call).
class FairShareQueue {
 public:
  struct Job {
    placement::QueueKey key;
    std::string team;
    int64_t slots = 1;  // what it takes when placed (its record's world_size)
  };
  // `queue`: one device kind's queued jobs, in any order (the store's order costs no sort).
  FairShareQueue(const TeamQuotas& quotas, Usage usage, std::string device, std::vector<Job> queue);
  // The same order read as it goes: `teams` are those with queued jobs of the kind, and
  // source(team, after) gives the team's next queued job after `after` (none: its first) in
  // the queue's order. A walk that stops early (the scheduler's pass stops at the first job
  // that waits for workers) then reads a few jobs a team, not a copy of the whole queue.
  using Source = std::function<std::optional<Job>(const std::string& team, const std::optional<placement::QueueKey>& after)>;
  FairShareQueue(const TeamQuotas& quotas, Usage usage, std::string device, std::vector<std::string> teams,
                 Source source);
  // The next job in the order, taken off the queue; none: no job is left but those of held
  // teams.
  std::optional<Job> Next();
  // A job of `team` placed on `slots` of this kind: its use, and so its share, grows.
  void Placed(const std::string& team, int64_t slots);
  // The team waits for the rest of this walk: Next skips its jobs.
  void Hold(const std::string& team);
  // The jobs of `team` not taken yet, in order.
  std::vector<Job> Left(const std::string& team) const;
  const Usage& usage() const { return usage_; }
  Usage TakeUsage() { return std::move(usage_); }

 private:
  const TeamQuotas& quotas_;
  Usage usage_;
  const std::string device_;
  struct Team {
    std::string name;
    std::vector<Job> jobs;  // in the queue's order, reversed (the next at the back)
    double share = 0;       // DominantShare as the use stands
    bool held = false;
    // Read as it goes (source_ set): the next job, once read, and the last one taken.
    std::optional<Job> head;
    bool read = false;
    std::optional<placement::QueueKey> last;
  };
  Team* Find(const std::string& team);
  const Job* Head(Team& t);  // the team's next job, if any
  Source source_;  // empty: the jobs were given whole
  std::vector<Team> teams_;  // in name order
};

// Each queued job's place in the order its device kind's FairShareQueue gives, were every job
// placed in its turn: job id -> (1-based position, the id of the job before it ("" for the
// first)). `queues`: by device kind; the kinds are walked in the map's order, the use of one
// carried into the next, as the scheduler's pass does.
std::map<std::string, std::pair<int64_t, std::string>> FairSharePositions(
    const TeamQuotas& quotas, Usage usage, std::map<std::string, std::vector<FairShareQueue::Job>> queues);
// One job's place in that order (the walk stops there): (0, "") when it is in no queue.
std::pair<int64_t, std::string> FairSharePosition(const TeamQuotas& quotas, Usage usage,
                                                  std::map<std::string, std::vector<FairShareQueue::Job>> queues,
                                                  const std::string& job_id);

// Cohorts. A team whose quota names a cohort may use more of a kind than its nominal quota,
// borrowing what the cohort's other teams leave idle of theirs: in all, the cohort's quota of
// the kind minus the cohort's use (over the teams whose quota names the kind), so that what
// one team borrowed is not lent again. Its own quota stays its own: a team within its nominal
// quota is admitted whatever the others borrowed (reclaimed from them by preemption: issue 50
// item 4). Per-cohort limits (the principals file's borrowing_limit and lending_limit, Kueue's
// borrowingLimit and lendingLimit): a team uses at most its borrowing_limit of a kind beyond
// its nominal quota, and the others borrow at most its lending_limit of its quota (the rest
// it keeps: its use takes from the kept part first, and what it lends is its lending limit
// less its use beyond that part). How many slots of `device` the team may borrow now beyond
// what its own quota leaves; none: the team has no cohort, or its quota does not name the kind.
std::optional<int64_t> Borrowable(const TeamQuotas& quotas, const Usage& usage, const std::string& team,
                                  const std::string& device);

// How many more slots of `device` the team may take now, borrowing included (borrow false:
// only what its own quota leaves, for a job that may not be preempted): -1 for no limit.
int64_t Room(const TeamQuotas& quotas, const Usage& usage, const std::string& team, const std::string& device,
             bool borrow = true);

// Of a job of `world` slots of `device` placed now, how many are beyond its team's nominal
// quota (borrowed from the cohort): what the job records as borrowed_slots.
int64_t BorrowedBy(const TeamQuotas& quotas, const Usage& usage, const std::string& team, const std::string& device,
                   int64_t world);

// Why a job of `team` that needs `want` slots of `device` may not be placed now (empty: its
// team's quota, with what its cohort lends, and its cap allow it), e.g. "team vision at its
// quota: 16 of 16 GPUs", or with a cohort "...; its cohort research lends 2 now", or where
// its borrowing limit stops it "...; its borrowing limit is 4 GPUs beyond its quota".
// borrow false: a job with scheduling.preemptible false, which never runs on borrowed slots (they
// are reclaimed by preemption), is held beyond its team's own quota ("...; it may not be
// preempted, so it does not borrow").
std::string HoldReason(const TeamQuotas& quotas, const Usage& usage, const std::string& team,
                       const std::string& device, int64_t want, bool borrow = true);

// Reclaim: whether a job of `team` that needs `want` slots of `device` fits its team's own
// nominal quota, and the cohort whose other teams' borrowed slots may be reclaimed for it by
// preemption (empty: none: no quota of the kind, no cohort, or the job needs more than the
// quota leaves).
std::string ReclaimCohort(const TeamQuotas& quotas, const Usage& usage, const std::string& team,
                          const std::string& device, int64_t want);

// The slots of `device` the team uses beyond its nominal quota (0: within it, or the kind is
// not limited for the team).
int64_t Borrowed(const TeamQuotas& quotas, const Usage& usage, const std::string& team, const std::string& device);

// The per-team series (gantry_coordinator_team_*: Cluster exports them, docs/operations.md).
struct QueuedJob {
  std::string team;
  int64_t queued_since_ms = 0;  // when it last entered the queue
  bool held = false;            // the last pass held it for its team's quota or cap
};
struct TeamFigures {
  std::map<std::string, int64_t> used;      // device kind -> placed ranks: the kinds it uses or has a quota of
  std::map<std::string, int64_t> nominal;   // the kinds its quota names
  std::map<std::string, int64_t> borrowed;  // Borrowed, for every kind of `used`
  int64_t queued = 0;                       // queued jobs (PENDING, RESTARTING)
  int64_t held = 0;                         // of which held for its own quota or cap
  // How long the oldest queued job that its own quota or cap does not hold has waited (0:
  // none): a job that waits though its team is within its quota (for workers, for the teams
  // before it in the fair share). The starvation alert reads it.
  double oldest_wait_seconds = 0;
};
// By team ("": jobs without a team): the teams the quotas name, and those with placed or
// queued jobs.
std::map<std::string, TeamFigures> Figures(const TeamQuotas& quotas, const Usage& usage,
                                           const std::vector<QueuedJob>& queued, int64_t now_ms);

// Why a job of `team` with scheduling.preemptible: false that needs `want` slots of `device`
// is refused at submit (empty: admitted). Such a job is admitted only within its team's
// nominal quota of its kind: with `others` slots of that kind held by the team's
// non-preemptible jobs not ended, others + want must not exceed it. A team without a quota of
// the kind (or a job without a team) has none to be within.
std::string NotPreemptibleRefusal(const TeamQuotas& quotas, const std::string& team, const std::string& device,
                                  int64_t want, int64_t others);

}  // namespace gantry::coordinator::quota
