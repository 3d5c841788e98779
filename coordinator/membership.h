// Who is in the cluster: the workers attached (their resources, what they run, when they were
// last heard from) and the shard servers registered. Membership is soft state: workers rebuild
// it by attaching again after a coordinator restart, shard servers by their next heartbeat.
//
// Thread-compatible, with two exceptions: Heartbeat and LargestMemory may be called from any
// thread at any time (a heartbeat is never queued behind a scheduling pass or a job's writes,
// or its worker would be counted out). The owner (Cluster) serialises every other call under
// its own lock; Membership takes no lock of its owner's, and lends none of its own.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "coordinator/stalls.h"
#include "gantry/v1/coordinator.pb.h"

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

struct MembershipOptions {
  int64_t worker_timeout_ms = 5000;  // a worker silent this long is dead
  // A dead worker stays listed (`gantry workers`, state dead) this long, then its record goes:
  // a worker that re-attaches does so under a new id, so without this a cluster whose workers
  // come and go would keep every id it ever gave out.
  int64_t dead_worker_retention_ms = 600000;
  int64_t shard_timeout_ms = 5000;  // a shard server silent this long is not offered to jobs
};

// One worker, attached or dead (kept dead_worker_retention_ms, then forgotten).
struct Member {
  v1::Worker info;  // its last_heartbeat_unix_ms is filled when listed
  WorkerSession* session = nullptr;  // null once dead
  int64_t generation = 0;     // of the job assignment it runs (info.job_id)
  int64_t dead_since_ms = 0;  // when it was counted out (state dead); 0 while attached
  std::set<int> running;      // the ranks of it not done yet (busy while any is)

  bool attached() const { return session != nullptr; }
  bool idle() const { return attached() && info.state() == "idle"; }
  // The worker runs no job any more (its job threads may still be ending: the worker joins
  // them before it starts the next assignment).
  void Free();
  // The worker is assigned rank `rank` of (job_id, generation).
  void Assign(const std::string& job_id, int64_t generation, int rank);

  // What heartbeats update, apart from the record, so that a heartbeat takes no lock but
  // the membership's map lock (shared) and this entry's own.
  struct Liveness {
    std::atomic<int64_t> last_seen_ms{0};
    std::mutex mu;
    v1::Heartbeat last_hb;  // the last heartbeat that named a job (mu)
    google::protobuf::RepeatedPtrField<v1::GpuStatus> gpus;  // as the last heartbeat reported them (mu)
  };
  std::shared_ptr<Liveness> live;
};

class Membership {
 public:
  explicit Membership(MembershipOptions options) : options_(options) {}

  // Workers.
  // A new worker, idle, under a fresh id (w-000001, ...).
  Member& Add(WorkerSession* session, const v1::Resources& resources, int64_t now_ms);
  // Any thread: the worker was heard from (hb: a heartbeat, whose job progress is kept when
  // it names a job). Unknown ids are ignored.
  void Heartbeat(const std::string& id, int64_t now_ms, const v1::Heartbeat* hb = nullptr);
  Member* Find(const std::string& id);          // attached or dead; null if unknown
  Member* FindAttached(const std::string& id);  // null if unknown or dead
  // Attached, silent for worker_timeout_ms, and not waiting on the coordinator's own backlog
  // of its messages.
  bool Silent(const Member& m, int64_t now_ms) const;
  std::vector<std::string> SilentIds(int64_t now_ms) const;
  // Counted out: no session, state dead, kept for dead_worker_retention_ms.
  void MarkDead(Member& m, int64_t now_ms);
  // Erases the records of workers dead for dead_worker_retention_ms.
  void ForgetDead(int64_t now_ms);
  // Every worker's record (dead ones included), with its last heartbeat time and its GPUs as
  // that heartbeat reported them (a dead worker's: as last heard).
  std::vector<v1::Worker> List() const;
  // Any thread: the memory of the largest attached worker (0: none).
  int64_t LargestMemory() const { return largest_memory_; }

  // Attached workers offering a device kind: how many, how many idle, and the ranks the idle
  // ones (and all of them: alive_slots) can host (those in `taken` not counted).
  struct Counts {
    int alive = 0, idle = 0, idle_slots = 0, alive_slots = 0;
  };
  Counts Count(const std::string& device, const std::set<const Member*>& taken = {}) const;
  // The idle attached workers offering a device kind, not in `taken`, in id order.
  std::vector<Member*> Idle(const std::string& device, const std::set<const Member*>& taken);
  // Attached, and busy.
  std::pair<int, int> AliveAndBusy() const;
  // The ranks of (job, generation) as the heartbeats of attached workers last reported them.
  std::map<int, RankProgress> RankProgressOf(const std::string& job_id, int64_t generation) const;

  // Shard servers.
  // Registered or heard from again; true when it is new or back after it was counted out.
  bool RegisterShardServer(const v1::RegisterShardServerRequest& r, int64_t now_ms);
  // Counted out until its next heartbeat (a worker could not reach it); false if unknown or
  // already out.
  bool CountOutShardServer(const std::string& address);
  std::vector<v1::ShardServerInfo> LiveShardServers(int64_t now_ms) const;
  std::vector<std::string> LiveShardAddresses(int64_t now_ms) const;
  std::string DataAddressOf(const std::string& server) const;  // empty if unknown

 private:
  void UpdateLargest();

  const MembershipOptions options_;
  std::map<std::string, Member> workers_;
  int64_t next_worker_ = 1;
  std::atomic<int64_t> largest_memory_{0};
  mutable std::shared_mutex live_mu_;  // live_: Heartbeat reads it from any thread
  std::map<std::string, std::shared_ptr<Member::Liveness>> live_;  // id → its Liveness, as workers_
  std::map<std::string, v1::ShardServerInfo> shards_;
};

}  // namespace gantry::coordinator
