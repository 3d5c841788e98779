// Client side of the shard servers: checkpoints as checksummed chunk streams.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gantry/v1/shardserver.grpc.pb.h"
#include "worker/train/checkpoint.h"

namespace gantry::agent {

constexpr size_t kChunkBytes = 1 << 20;

// Streams the named files of dir as parts of checkpoint (job, step), not committed: a
// sharded checkpoint's ranks each send their own. Returns the bytes written.
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

// A stored checkpoint read in place: the manifest and config whole, the parts range by range
// as the loader asks (a ZeRO rank fetches only the optimizer ranges it keeps).
class ShardCheckpointSource final : public train::CheckpointSource {
 public:
  explicit ShardCheckpointSource(StoredCheckpoint c) : c_(std::move(c)) {}
  std::string where() const override;
  absl::StatusOr<std::string> ReadSmallFile(const std::string& name) override;
  absl::StatusOr<std::shared_ptr<const ByteSource>> OpenPart(const std::string& name) override;
  int64_t bytes_read() const { return bytes_read_.load(); }

 private:
  // The stub of the server holding file `name`, and the file's entry.
  absl::StatusOr<std::pair<std::shared_ptr<v1::ShardServer::StubInterface>, const StoredCheckpoint::File*>> Locate(
      const std::string& name);
  StoredCheckpoint c_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<v1::ShardServer::StubInterface>> stubs_;
  std::atomic<int64_t> bytes_read_{0};
};

}  // namespace gantry::agent
