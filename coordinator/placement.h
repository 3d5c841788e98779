// The coordinator's placement rules, as functions of the state they read (no locks, no
// I/O): which queued job goes first, how long a failing job waits before its next try,
// which shard servers it waits for, which idle workers take its ranks, and the partition
// map of its parameters over the shard servers. Cluster::ScheduleLocked applies them; the
// service's queue position and "waiting for" text read the same rules.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gantry/v1/coordinator.pb.h"
#include "jobspec/job_spec.h"

namespace gantry::coordinator::placement {

inline bool Queued(v1::JobState s) { return s == v1::PENDING || s == v1::RESTARTING || s == v1::PREEMPTED; }

// The order in which queued jobs (PENDING, RESTARTING or PREEMPTED) are placed: higher priority
// first, within one a restarting or preempted job before new ones, then submission order. Placement is strict
// first come, first served in this order (within a device kind): a job that does not fit
// holds back the ones behind it. A job's key sorts before the keys of the jobs behind it.
// Job ids in submission order: "j-" and the job's number, six digits at least, so a longer id
// is a later one (j-1000000 after j-999999, which their text would put first).
struct JobIdLess {
  bool operator()(const std::string& a, const std::string& b) const {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  }
};
struct QueueKey {
  int32_t priority = 0;
  bool restarting = false;
  std::string id;
  static QueueKey Of(const v1::Job& j) {
    return {j.priority(), j.state() == v1::RESTARTING || j.state() == v1::PREEMPTED, j.id()};
  }
  bool operator<(const QueueKey& o) const {
    if (priority != o.priority) return priority > o.priority;
    if (restarting != o.restarting) return restarting;
    return JobIdLess()(id, o.id);
  }
};
// The queued jobs of `jobs`, in that order.
std::vector<v1::Job> QueueOrder(const std::vector<v1::Job>& jobs);

// The wait before a restart that follows restarts_in_a_row failures without progress (no
// checkpoint committed in between): the first at once, then 1, 2, 4, ... 16 s after the
// failure, so that a cause that has not passed yet does not use up max_restarts in a burst.
int64_t RestartBackoffMs(int restarts_in_a_row);

// The shard servers of a RESTARTING job's last committed checkpoint that are not live, while
// the job should still wait for them: until wait_ms after its failure (then it is placed
// anyway and resumes from what the live servers hold whole). Empty: do not wait.
std::vector<std::string> MissingCheckpointServers(const v1::Job& job, const std::vector<std::string>& live,
                                                  int64_t now_ms, int64_t wait_ms);

// Whether a worker offers the device kind a job's resources.device names (a worker that
// reports none offers cpu).
inline bool Offers(const v1::Resources& r, const std::string& device) {
  return (r.device_kind().empty() ? std::string("cpu") : r.device_kind()) == device;
}

// How many ranks a worker hosts at once: one per GPU on a cuda kind (a rank's local index
// is its device ordinal; a worker that sees no GPU hosts none), one on a cpu worker.
inline int SlotsOf(const v1::Resources& r) { return Offers(r, "cpu") ? 1 : std::max(0, r.device_count()); }

// Gang placement of `world` ranks over the idle workers: for each rank in rank order, the
// worker (an index into idle) and its local index there, or empty when they do not fit (all
// ranks or none). A worker runs one job at a time (its GPUs that the job leaves unused wait
// for the job's end).
//   - A job that one worker can hold goes whole to the worker with the fewest GPUs that
//     holds it (best fit; on a tie, the first in the order below).
//   - Otherwise ranks are packed onto as few hosts as possible: hosts with the most idle
//     slots first, within a host the workers with the most slots first, consecutive ranks on
//     one worker (local 0, 1, ...), then on the next. A tensor-parallel group (tp
//     consecutive ranks) always shares a host: hosts are taken in whole groups of tp.
struct IdleWorker {
  std::string host;
  int slots = 1;
};
struct Slot {
  size_t worker = 0;
  int local = 0;
  bool operator==(const Slot& o) const { return worker == o.worker && local == o.local; }
};
std::vector<Slot> ChooseSlots(const std::vector<IdleWorker>& idle, int world, int tp);

// The partition map of a job's parameters over the live shard servers: where checkpoint
// slices go and, in parameter-server mode, which server runs AdamW on which range.
// data_address gives a server's parameter-server data port.
std::vector<v1::ParamRange> ParamRanges(const jobspec::JobSpec& spec, const std::vector<std::string>& servers,
                                        const std::function<std::string(const std::string&)>& data_address);

// A placement's layout as the Assignment carries it (its typed fields, the one owner of the
// layout for the ranks: agent::AssignedSpec reads them back into a jobspec::PlacedLayout).
v1::Layout LayoutMessage(const jobspec::PlacedLayout& l);

// Where a placement's ranks start (Assignment.resume_job_id, resume_step): the job's own
// newest whole checkpoint, the later of the coordinator's record (recorded) and the shard
// servers' committed manifests (listed; 0 when not listed or none), else what its spec's
// checkpoint.resume_from names: JOB@STEP as given, or JOB's newest (from_recorded,
// from_listed). ("", 0) is a fresh start; an error names why resume_from cannot be met.
struct Stored {
  int64_t recorded = 0, listed = 0;
  int64_t newest() const { return std::max(recorded, listed); }
};
absl::StatusOr<std::pair<std::string, int64_t>> ResumePoint(const v1::Job& job, const jobspec::JobSpec& spec,
                                                            Stored own, Stored from);

}  // namespace gantry::coordinator::placement
