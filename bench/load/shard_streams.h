// The shard server under load (issue 23): N checkpoint streams of B bytes each, all at once,
// against the same N one after another, each on a fresh gantry-shardserver (a child process,
// port 0), through the real client (shardserver::UploadSources, CommitCheckpoint, ReadRange).
// Every stream is one checkpoint (its own job, one part) written and committed; afterwards
// every byte of every checkpoint is read back and compared.
//
// The reference rate is one stream at a time over the same checkpoints: the same bytes
// through the same store, so that both phases pay the same memtable flushes and WAL syncs,
// and the ratio shows what concurrency costs (or gains). The first stream alone is reported
// too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/load/daemon_process.h"

namespace gantry::load {

struct ShardStreamOptions {
  int streams = 64;
  int64_t bytes = int64_t{16} << 20;  // per stream
  std::string shardserver_bin;
  std::string dir;  // empty: a temporary directory, removed at the end
};

struct ShardStreamReport {
  ShardStreamOptions options;
  double first_seconds = 0;              // the first stream alone (write and commit)
  double sequential_seconds = 0;         // all N, one after another
  double concurrent_seconds = 0;         // all N at once: from their start to the last commit
  double first_mb_s = 0, sequential_mb_s = 0, concurrent_mb_s = 0;
  double ratio = 0;                      // concurrent / sequential rate
  int committed = 0;                     // concurrent streams whose commit succeeded
  int64_t bytes_verified = 0;            // read back identical, both phases
  Memory server_memory;                  // the concurrent phase's server, at its end
  std::vector<std::string> errors;
};

absl::StatusOr<ShardStreamReport> RunShardStreams(const ShardStreamOptions& options);
std::string FormatReport(const ShardStreamReport& r);
// Every stream committed, every byte identical, and the rate at least 0.7x the reference.
bool TargetsMet(const ShardStreamReport& r);

}  // namespace gantry::load
