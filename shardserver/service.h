// The ShardServer gRPC service: a RocksDB chunk store for checkpoints.
//
// Keys: "chunk/<job>/<step>/<part>/<offset>" → chunk bytes; "part/<job>/<step>/<part>" →
// the part's size once its last chunk arrived; "ckpt/<job>/<step>" → CheckpointInfo, the
// commit record. Chunks are invisible until a Commit names their part: a checkpoint is
// whole or absent. Each WriteChunks stream lands in one synced batch at its end, so a
// stream refused mid-way (bad crc32c, a gap in the offsets) writes nothing. At start, the
// parts of checkpoints never committed (their writers died with the old process or lost
// it) are reclaimed. Kill points (common/kill_point.h) sit around each write, so that a crash
// test can stop the server between any two of them.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "common/rocks.h"
#include "gantry/v1/shardserver.grpc.pb.h"

namespace gantry::shardserver {

class ShardService final : public v1::ShardServer::CallbackService {
 public:
  static absl::StatusOr<std::unique_ptr<ShardService>> Open(const std::string& dir, metrics::Registry* registry);

  grpc::ServerReadReactor<v1::Chunk>* WriteChunks(grpc::CallbackServerContext* ctx,
                                                  v1::WriteChunksResponse* resp) override;
  grpc::ServerUnaryReactor* Commit(grpc::CallbackServerContext* ctx, const v1::CommitRequest* req,
                                   v1::CommitResponse* resp) override;
  grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* ctx,
                                            const v1::ListCheckpointsRequest* req,
                                            v1::ListCheckpointsResponse* resp) override;
  grpc::ServerWriteReactor<v1::Chunk>* ReadChunks(grpc::CallbackServerContext* ctx,
                                                  const v1::ReadChunksRequest* req) override;
  grpc::ServerUnaryReactor* DeleteCheckpoint(grpc::CallbackServerContext* ctx,
                                             const v1::DeleteCheckpointRequest* req,
                                             v1::DeleteCheckpointResponse* resp) override;

  int64_t bytes_stored() const;
  rocks::Db& db() { return *db_; }
  // Deletes the chunks of parts whose checkpoint is not committed (run at Open: after a
  // crash their writers are gone). Returns the bytes reclaimed.
  absl::StatusOr<int64_t> ReclaimUncommitted();
  metrics::Registry* registry() { return registry_; }
  // Sets gantry_shardserver_stored_bytes (after the store changed).
  void UpdateStoredBytes();

 private:
  ShardService(std::unique_ptr<rocks::Db> db, metrics::Registry* r) : db_(std::move(db)), registry_(r) {}
  std::unique_ptr<rocks::Db> db_;
  metrics::Registry* registry_;
};

}  // namespace gantry::shardserver
