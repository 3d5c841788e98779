// The coordinator's durable state in RocksDB: jobs and their events. What a client or a
// worker is told (a job accepted, cancelled, placed, failed) is synced (WAL fsync) before it
// is acknowledged, so it survives a SIGKILL and a power loss. Progress is written to the WAL
// without a sync (sync=false: a step's counters and event, the RUNNING transition, the
// "checkpoint committed" record): it survives a SIGKILL (the OS has the bytes) but not a
// power loss, after which the job resumes from its placement and last committed checkpoint
// as a restart does (docs/operations.md, "Limits"). Writes of different jobs run
// concurrently, so that RocksDB syncs the WAL once for a group of them (its group commit);
// one job's writes are in order.
//
// Beside the records, the store keeps an index of every job's state in memory (read once
// at Open, then kept by every write of a record): the queue in placement order per device
// kind, and the count of jobs in each state. A coordinator keeps every job it ever ran, so
// the scheduler, the queue positions and the gauges read the index, not every record.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rocks.h"
#include "coordinator/placement.h"
#include "gantry/v1/coordinator.pb.h"

namespace gantry::coordinator {

class Store {
 public:
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& dir);

  // Assigns the next id ("j-000001", ...) and writes the job, with `events` (their job_id
  // set to the new id, each given the next sequence number), atomically. `device`, if given,
  // is its device kind (its queue: SetDevice's); `created`, if given, is called with the id once
  // the record is written and before the index shows the job to anyone (SubmitJob keeps the
  // spec it parsed there, so no scheduling pass parses it again).
  absl::StatusOr<std::string> CreateJob(v1::Job job, std::vector<v1::JobEvent> events = {},
                                        const std::string& device = "",
                                        const std::function<void(const std::string& id)>& created = {});
  // sync=false is for progress that may be lost in a crash (step counters): the write is in
  // the WAL but not fsynced.
  absl::Status PutJob(const v1::Job& job, bool sync = true);
  // Job records and their events, written in one atomic batch: all or none, one WAL sync
  // for all of them, and (synced) none of it visible to a reader before it is durable. Each
  // event is given the next sequence number of its job (set in *updates).
  struct Update {
    v1::Job job;
    std::vector<v1::JobEvent> events;
  };
  absl::Status Commit(std::vector<Update>* updates, bool sync = true);
  // NotFound for an unknown id.
  absl::StatusOr<v1::Job> GetJob(const std::string& id) const;
  // In id order (= submission order).
  absl::StatusOr<std::vector<v1::Job>> ListJobs() const;
  // The same without each job's spec_yaml and spec_normalised, from the index (no record
  // is read): what a listing for people shows. Shared, immutable copies: the index's lock is
  // held only to take them.
  std::vector<std::shared_ptr<const v1::Job>> ListBrief() const;
  // A page of the same, newest first: the jobs in `state` (JOB_STATE_UNSPECIFIED: any)
  // submitted before job `before` (empty: from the newest), at most limit; *more says whether
  // another such job is left.
  std::vector<std::shared_ptr<const v1::Job>> BriefPage(v1::JobState state, const std::string& before, size_t limit,
                                                         bool* more) const;
  // Appends an event with the next sequence number of its job.
  absl::StatusOr<int64_t> AppendEvent(v1::JobEvent event, bool sync = true);
  // Events from from_seq on, at most limit of them (0: all).
  absl::StatusOr<std::vector<v1::JobEvent>> Events(const std::string& job_id, int64_t from_seq,
                                                   size_t limit = 0) const;

  // Tests: the next n writes (of any method above) fail with UNAVAILABLE before they reach
  // RocksDB, as writes to a failing disk would: nothing of them is stored or indexed.
  void FailNextWrites(int n) { failing_writes_ = n; }

  // ---- The index.
  // A queued job's device kind (its spec's resources.device) is the cluster's to say, which
  // parses the spec; until it has, the job is unresolved, in no device's queue.
  void SetDevice(const std::string& id, const std::string& device);
  std::vector<std::string> Unresolved() const;
  // The device kinds with queued (resolved) jobs.
  std::vector<std::string> QueuedDevices() const;
  // The queued job of `device` that follows `after` in placement order (the first without
  // it), if any. A walk that writes records as it goes stays valid: it moves by key.
  std::optional<placement::QueueKey> NextQueued(const std::string& device,
                                                const std::optional<placement::QueueKey>& after) const;
  // The teams with queued jobs of `device`, and a team's queued job of `device` that follows
  // `after` (the first without it) in placement order, with its brief record: the fair share's
  // walk reads each team's queue a job at a time, as NextQueued, rather than copying the kind's
  // whole queue each pass.
  std::vector<std::string> QueuedTeams(const std::string& device) const;
  using BriefJob = std::shared_ptr<const v1::Job>;
  std::optional<std::pair<placement::QueueKey, BriefJob>> NextQueuedOfTeam(
      const std::string& device, const std::string& team, const std::optional<placement::QueueKey>& after) const;
  bool IsQueued(const std::string& id) const;
  bool AnyQueued(const std::string& device) const;
  // A queued job's place in its device's queue: (1-based position, the job before it or ""
  // for the head); (0, "") for a job not queued or unresolved.
  std::pair<int64_t, std::string> QueuePosition(const std::string& id) const;
  // The same for every queued job at once.
  std::map<std::string, std::pair<int64_t, std::string>> QueuePositions() const;
  // A queued job's device kind and team ((device, team)); none for a job not queued or
  // unresolved.
  std::optional<std::pair<std::string, std::string>> QueuedAt(const std::string& id) const;
  // The jobs in a state, in id order.
  std::vector<std::string> JobsIn(v1::JobState state) const;
  // The queued jobs of `device` in placement order, as the index holds them (brief records:
  // no spec texts), without reading the store: what the quota walk orders by team.
  std::vector<std::pair<placement::QueueKey, BriefJob>> QueuedBriefs(const std::string& device) const;
  // The placed jobs (SCHEDULED, RUNNING), brief, each with its device kind ("" while its spec
  // has not been read): what a team uses.
  std::vector<std::pair<BriefJob, std::string>> PlacedBriefs() const;
  std::map<v1::JobState, int64_t> CountByState() const;

 private:
  explicit Store(std::unique_ptr<rocks::Db> db) : db_(std::move(db)) {}
  // The next sequence number of job's events (read from the store the first time); job's
  // stripe held.
  absl::StatusOr<int64_t> TakeSeq(const std::string& job_id);
  void GiveBackSeqs(const std::map<std::string, int64_t>& before);
  // The index after a record of `job` was written (job's stripe held).
  // device: a new job's device kind, when known (CreateJob's).
  void Index(const v1::Job& job, const std::string& device = "");
  // A job's writes hold its stripe from taking sequence numbers to updating the index: its
  // events are stored in sequence order (watchers read them in that order) and the index
  // follows the order of its record's writes. Jobs of other stripes write meanwhile.
  static constexpr size_t kStripes = 64;
  std::mutex& StripeOf(const std::string& job_id) { return stripes_[std::hash<std::string>()(job_id) % kStripes]; }
  std::vector<std::unique_lock<std::mutex>> LockStripes(const std::vector<std::string>& job_ids);

  // UNAVAILABLE while FailNextWrites has writes left to fail (counting this one).
  absl::Status InjectedFault();
  std::atomic<int> failing_writes_{0};

  std::unique_ptr<rocks::Db> db_;
  std::mutex stripes_[kStripes];
  std::mutex seq_mu_;  // next_seq_ and next_id_ (held briefly, never across a write)
  std::map<std::string, int64_t> next_seq_;  // per job, read from the store once
  // The next job id's number: the stored counter, or past the largest id stored (two
  // creations may store their counters out of order).
  int64_t next_id_ = 1;

  struct Brief {
    bool known = false;  // indexed before
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    placement::QueueKey key;
    std::string device;
    bool resolved = false;
    std::shared_ptr<const v1::Job> brief;  // the record without its spec texts (a tenth of its bytes)
  };
  // Takes a queued job (as b last indexed it) out of its device's queue or the unresolved
  // set; index_mu_ held.
  void Unqueue(const std::string& id, const Brief& b);
  // Puts a queued job (as b says) in its device's and team's queues or the unresolved set.
  void Enqueue(const std::string& id, const Brief& b);
  mutable std::mutex index_mu_;  // the index below (held briefly)
  std::map<std::string, Brief, placement::JobIdLess> index_;         // every job, in submission order
  // device → its queued jobs, each with its entry in index_ (whose nodes do not move): a walk
  // of a queue reads the briefs without looking each job up.
  std::map<std::string, std::map<placement::QueueKey, const Brief*>> queues_;
  // The same split by team: device → team → its queued jobs.
  std::map<std::string, std::map<std::string, std::map<placement::QueueKey, const Brief*>>> team_queues_;
  std::set<std::string> unresolved_;                                 // queued, device unknown
  // The placed jobs (SCHEDULED, RUNNING), in id order: PlacedBriefs walks these, not every job
  // the coordinator ever ran (each scheduling pass and queue position asks). index_'s nodes
  // do not move.
  std::map<std::string, const Brief*, placement::JobIdLess> placed_;
  static bool Placed(v1::JobState s) { return s == v1::SCHEDULED || s == v1::RUNNING; }
  std::map<v1::JobState, int64_t> by_state_;
};

}  // namespace gantry::coordinator
