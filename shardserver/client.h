// Client side of the shard servers: checkpoints as checksummed chunk streams.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_util.h"
#include "gantry/v1/shardserver.grpc.pb.h"

namespace gantry::agent {

constexpr size_t kChunkBytes = 1 << 20;

// Streams each (name, bytes) as a part of checkpoint (job, step), not committed: a sharded
// checkpoint's ranks each send their own, from memory. Returns the bytes written.
absl::StatusOr<int64_t> UploadSources(const std::string& address, const std::string& job_id, int64_t step,
                                      const std::vector<std::pair<std::string, const ByteSource*>>& files);
// The same for the named files of dir.
absl::StatusOr<int64_t> UploadFiles(const std::string& address, const std::string& job_id, int64_t step,
                                    const std::string& dir, const std::vector<std::string>& files);
// Makes checkpoint (job, step) visible once every named part is written (else an error,
// and nothing is visible).
absl::Status CommitCheckpoint(const std::string& address, const std::string& job_id, int64_t step,
                              const std::vector<std::string>& parts, const std::string& manifest_json);
absl::Status DeleteCheckpoint(const std::string& address, const std::string& job_id, int64_t step);

// Streams every regular file of dir as a part (its file name), then commits the checkpoint
// (job, step) with the manifest. Returns the bytes written.
absl::StatusOr<int64_t> UploadCheckpoint(const std::string& address, const std::string& job_id, int64_t step,
                                         const std::string& dir, const std::string& manifest_json);

absl::StatusOr<std::vector<v1::CheckpointInfo>> ListCheckpoints(const std::string& address, const std::string& job_id);

// Reads the named parts of a committed checkpoint into dir (created), checking every
// chunk's crc32c and that offsets are contiguous.
absl::Status DownloadCheckpoint(const std::string& address, const std::string& job_id, int64_t step,
                                const std::vector<std::string>& parts, const std::string& dir);
// Streams bytes [offset, offset + length) of a committed part (length 0: to its end) into
// sink, checking each chunk's crc32c and that the chunks follow each other. Returns the
// bytes read.
absl::StatusOr<int64_t> ReadRange(v1::ShardServer::StubInterface& stub, const std::string& address,
                                  const std::string& job_id, int64_t step, const std::string& part, int64_t offset,
                                  int64_t length, const std::function<void(const std::string&)>& sink);
// Bytes [offset, offset + n) of a committed checkpoint's part into dst (the same checks).
absl::Status ReadPartRange(v1::ShardServer::StubInterface& stub, const std::string& address, const std::string& job_id,
                           int64_t step, const std::string& part, int64_t offset, int64_t n, char* dst);

// A checkpoint as stored over the shard servers: each server holds and commits the files
// of its slices (a checkpoint of one server: all of them). It is whole when every file its
// manifest names (the parts, manifest.json, config.json) is committed somewhere; a commit
// that reached only some servers leaves it incomplete, and it is not listed.
struct StoredCheckpoint {
  std::string job_id;
  int64_t step = 0;
  int64_t bytes = 0;                // all files on all servers
  int64_t commit_time_unix_ms = 0;  // the latest server's commit
  std::string manifest_json;
  struct File {
    std::string server;
    int64_t bytes = 0;
  };
  std::map<std::string, File> files;  // name → where
  std::vector<std::string> servers;   // those holding files of it
};
// The whole checkpoints of job over `servers`, by step. A server that cannot be listed is
// named in *unreachable (its checkpoints then look incomplete).
std::vector<StoredCheckpoint> ListStoredCheckpoints(const std::vector<std::string>& servers, const std::string& job_id,
                                                    std::vector<std::string>* unreachable = nullptr);

}  // namespace gantry::agent
