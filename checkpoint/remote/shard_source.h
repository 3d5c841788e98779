// A checkpoint stored on the shard servers, read in place by the checkpoint loader and the
// exporter (the client calls themselves: shardserver/client/shard_client.h).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "shardserver/client/shard_client.h"
#include "checkpoint/checkpoint.h"

namespace gantry::checkpoint {

// A stored checkpoint read in place: the manifest and config whole, the parts range by range
// as the loader asks (a ZeRO rank fetches only the optimizer ranges it keeps).
class ShardCheckpointSource final : public checkpoint::CheckpointSource {
 public:
  explicit ShardCheckpointSource(shardserver::StoredCheckpoint c) : c_(std::move(c)) {}
  std::string where() const override;
  absl::StatusOr<std::string> ReadSmallFile(const std::string& name) override;
  absl::StatusOr<std::shared_ptr<const ByteSource>> OpenPart(const std::string& name) override;
  int64_t bytes_read() const { return bytes_read_.load(); }

 private:
  // The stub of the server holding file `name`, and the file's entry.
  absl::StatusOr<std::pair<std::shared_ptr<v1::ShardServer::StubInterface>, const shardserver::StoredCheckpoint::File*>> Locate(
      const std::string& name);
  shardserver::StoredCheckpoint c_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<v1::ShardServer::StubInterface>> stubs_;
  std::atomic<int64_t> bytes_read_{0};
};

}  // namespace gantry::checkpoint
