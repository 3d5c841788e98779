// The rendezvous store of the coordinator: the keys a job's ranks exchange to build their
// communicators (NCCL unique ids, Gloo addresses) and the failure reports of ranks whose
// collective failed. Keys are scoped by (job, generation). A Get may wait for its key: it is
// answered by the Put of that key, by the job leaving its placement (Drop), or by its wait
// running out (Expire). Whether the (job, generation) may use the store is the caller's
// check (Cluster::CheckGeneration). Thread-safe; callbacks run without the lock held.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::coordinator {

class Rendezvous {
 public:
  using Done = std::function<void(absl::StatusOr<std::string>)>;
  // Keys under this prefix are failure reports: they stay after the job left its placement,
  // so that the ranks that survive a lost peer can still tell each other apart. A process
  // group's keys are under its name ("dp/s0/t0/gantry/failed/2"): the prefix counts after
  // any whole path segment.
  static constexpr char kFailureReportPrefix[] = "gantry/failed/";
  static bool IsFailureReport(const std::string& key) {
    return key.rfind(kFailureReportPrefix, 0) == 0 || key.find(std::string("/") + kFailureReportPrefix) != std::string::npos;
  }

  ~Rendezvous();  // the waiting Gets are answered UNAVAILABLE

  void Put(const std::string& job_id, int64_t generation, const std::string& key, const std::string& value);
  // done runs once: with the value, NOT_FOUND if it is not set and wait_ms <= 0, else when
  // it is put, the job drops it (ABORTED) or the wait runs out (DEADLINE_EXCEEDED, Expire).
  void Get(const std::string& job_id, int64_t generation, const std::string& key, int64_t wait_ms, int64_t now_ms,
           Done done);
  // The job left its placement: its keys go, but for failure reports, and its waiting Gets
  // are answered ABORTED.
  void Drop(const std::string& job_id);
  // Answers the Gets whose wait ended by now_ms.
  void Expire(int64_t now_ms);

 private:
  struct Waiter {
    std::string job_id, key;
    int64_t generation, deadline_ms;
    Done done;
  };
  std::mutex mu_;
  std::map<std::tuple<std::string, int64_t, std::string>, std::string> values_;
  std::vector<Waiter> waiters_;
};

}  // namespace gantry::coordinator
