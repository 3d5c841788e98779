// Client side of the shard servers: checkpoints as checksummed chunk streams.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_util.h"
#include "gantry/v1/shardserver.grpc.pb.h"

namespace gantry::shardserver {

constexpr size_t kChunkBytes = 1 << 20;

// Deadlines of the checkpoint calls that move no checkpoint bytes, sized to the server's
// work. A commit reads one size record per part and makes one synced RocksDB write; a
// delete is one synced batch of range deletes; a listing reads the job's commit records.
// None grows with the checkpoint's bytes, so each is bounded by a synced write on a busy
// disk (a few seconds at worst), with room to spare, and a commit by its part count.
struct ShardDeadlines {
  double commit_seconds = 10;
  double commit_per_part_seconds = 0.01;
  double delete_seconds = 10;
  double list_seconds = 10;
  double Commit(size_t parts) const { return commit_seconds + commit_per_part_seconds * static_cast<double>(parts); }
};

// Streams each (name, bytes) as a part of checkpoint (job, step), not committed: a sharded
// checkpoint's ranks each send their own, from memory. Returns the bytes written.
absl::StatusOr<int64_t> UploadSources(const std::string& address, const std::string& job_id, int64_t step,
                                      const std::vector<std::pair<std::string, const ByteSource*>>& files);
// The same for the named files of dir.
absl::StatusOr<int64_t> UploadFiles(const std::string& address, const std::string& job_id, int64_t step,
                                    const std::string& dir, const std::vector<std::string>& files);
// Whose a checkpoint is: its job's owner and team, recorded with its commit (the shard
// server authorises reads and deletes by them, common/authz.h). Empty: nobody's.
struct CheckpointOwner {
  std::string owner, team;
};

// Makes checkpoint (job, step) visible once every named part is written (else an error,
// and nothing is visible).
absl::Status CommitCheckpoint(const std::string& address, const std::string& job_id, int64_t step,
                              const std::vector<std::string>& parts, const std::string& manifest_json,
                              const CheckpointOwner& owner = {});

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

// The shard servers as a daemon that must not block sees them (the coordinator): one
// long-lived channel per server, made on first use and kept (gRPC reconnects it after a
// server restarts), and the checkpoint calls without waiting: each returns at once and its
// callback runs on a gRPC thread when the server answers or the deadline passes. Callbacks
// must not block either: hand slow work on to an executor. Thread-safe.
class ShardClients {
 public:
  using Done = std::function<void(absl::Status)>;
  using Listed = std::function<void(absl::StatusOr<std::vector<v1::CheckpointInfo>>)>;
  // The whole checkpoints over the servers (as ListStoredCheckpoints) and the servers that
  // could not be listed, each with why.
  using StoredListed = std::function<void(std::vector<StoredCheckpoint>, std::vector<std::string> unreachable)>;

  explicit ShardClients(ShardDeadlines deadlines = {}) : deadlines_(deadlines) {}

  // As CommitCheckpoint.
  void Commit(const std::string& address, const std::string& job_id, int64_t step, const std::vector<std::string>& parts,
              const std::string& manifest_json, const CheckpointOwner& owner, Done done);
  void Delete(const std::string& address, const std::string& job_id, int64_t step, Done done);
  void List(const std::string& address, const std::string& job_id, Listed done);
  // Every server listed at once; done runs after the last answer.
  void ListStored(const std::vector<std::string>& servers, const std::string& job_id, StoredListed done);

 private:
  std::shared_ptr<v1::ShardServer::Stub> StubFor(const std::string& address);

  const ShardDeadlines deadlines_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<v1::ShardServer::Stub>> stubs_;
};

}  // namespace gantry::shardserver
