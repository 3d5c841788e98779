// Client side of the shard servers: checkpoints as checksummed chunk streams.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gantry/v1/shardserver.grpc.pb.h"

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

}  // namespace gantry::agent
