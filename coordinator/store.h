// The coordinator's durable state in RocksDB: jobs and their events. Every write is
// synced (WAL fsync) before it is acknowledged, so an accepted job survives a SIGKILL.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rocks.h"
#include "gantry/v1/coordinator.pb.h"

namespace gantry::coordinator {

class Store {
 public:
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& dir);

  // Assigns the next id ("j-000001", ...) and writes the job, atomically.
  absl::StatusOr<std::string> CreateJob(v1::Job job);
  // sync=false is for progress that may be lost in a crash (step counters): the write is in
  // the WAL but not fsynced.
  absl::Status PutJob(const v1::Job& job, bool sync = true);
  // NotFound for an unknown id.
  absl::StatusOr<v1::Job> GetJob(const std::string& id) const;
  // In id order (= submission order).
  absl::StatusOr<std::vector<v1::Job>> ListJobs() const;
  // Appends an event with the next sequence number of its job.
  absl::StatusOr<int64_t> AppendEvent(v1::JobEvent event, bool sync = true);
  // Events from from_seq on, at most limit of them (0: all).
  absl::StatusOr<std::vector<v1::JobEvent>> Events(const std::string& job_id, int64_t from_seq,
                                                   size_t limit = 0) const;

 private:
  explicit Store(std::unique_ptr<rocks::Db> db) : db_(std::move(db)) {}
  std::unique_ptr<rocks::Db> db_;
  std::mutex mu_;  // serialises id and sequence allocation
  std::map<std::string, int64_t> next_seq_;  // per job, read from the store once
};

}  // namespace gantry::coordinator
