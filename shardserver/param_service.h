// The ParamServer gRPC service: a shard server's part of parameter-server mode. For each
// job it holds one range of the flat parameter buffer with its AdamW state (fp32, in
// memory) and steps it once the workers have pushed that range's whole gradient for the
// step. The push that completes a step runs AdamW (vectorised, threaded) before it answers,
// so a worker that has seen every rank's push return can read the new parameters.
#pragma once

#include <grpcpp/grpcpp.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

#include "absl/status/status.h"
#include "common/buffer.h"
#include "kernels/adamw.h"
#include "common/metrics.h"
#include "gantry/v1/shardserver.grpc.pb.h"

namespace gantry::shardserver {

class ParamService final : public v1::ParamServer::CallbackService {
 public:
  explicit ParamService(metrics::Registry* registry) : registry_(registry) {}
  ~ParamService() override;

  // Serves pushes, reads and writes of payloads on a plain TCP port as well (common/net.h's
  // protocol): gRPC's per-byte cost is several times a raw stream's. Returns "host:port".
  absl::StatusOr<std::string> StartDataPort(const std::string& host);
  // The threads held for data port connections, open or not yet joined (tests).
  size_t DataConnectionThreads() {
    std::lock_guard<std::mutex> l(conn_mu_);
    return conn_threads_.size();
  }

  grpc::ServerUnaryReactor* InitRange(grpc::CallbackServerContext* ctx, const v1::InitRangeRequest* req,
                                      v1::InitRangeResponse* resp) override;
  grpc::ServerUnaryReactor* WriteParams(grpc::CallbackServerContext* ctx, const v1::ParamsChunk* req,
                                        v1::ParamsAck* resp) override;
  grpc::ServerUnaryReactor* PushGradients(grpc::CallbackServerContext* ctx, const v1::GradientChunk* req,
                                          v1::PushAck* resp) override;
  grpc::ServerUnaryReactor* ReadParams(grpc::CallbackServerContext* ctx, const v1::ReadParamsRequest* req,
                                       v1::ParamsChunk* resp) override;

 private:
  struct Run {
    size_t begin = 0, end = 0;  // local indices
    bool decay = false;
  };
  struct Range {
    int64_t generation = 0;
    size_t begin = 0, end = 0;  // flat
    kernels::AdamWConfig adamw;
    std::vector<Run> runs;  // [0, size) cut by the decay flag
    FloatBuffer params, m, v, grad;
    int64_t step = 0;     // steps applied
    size_t covered = 0;   // gradient elements pushed for step + 1
    std::mutex mu;
    size_t size() const { return end - begin; }
    FloatBuffer* Buffer(v1::RangeBuffer b) { return b == v1::ADAM_M ? &m : b == v1::ADAM_V ? &v : &params; }
  };
  // A push of n values already copied into r->grad at local index at: counts them and runs
  // AdamW when they complete the step (r->mu held).
  absl::Status CompletePushLocked(Range* r, int64_t step, double lr, size_t n, bool* applied);
  // Serves one data port connection until it closes; `id` names it in conn_threads_.
  void ServeConnection(int fd, uint64_t id);
  // Values [offset, offset + n) inside the range; a gRPC payload of whole floats within the
  // message limit as well. Errors name what was sent and the range.
  static absl::Status CheckWithin(const Range& r, const char* what, int64_t offset, size_t n);
  static absl::Status CheckPayload(const Range& r, const char* what, int64_t offset, size_t bytes);
  // The job's range at this generation, or an error naming what does not match.
  absl::StatusOr<Range*> Find(const std::string& job, int64_t generation);

  metrics::Registry* registry_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Range>> ranges_;  // by job
  int listen_fd_ = -1;
  std::thread acceptor_;
  std::mutex conn_mu_;
  std::vector<int> conns_;  // the open connections (shut down by the destructor)
  // Each connection's thread, by id. A thread that has served its connection puts its id in
  // finished_, and the acceptor joins it at the next connection: kept until the server
  // stopped, every connection ever made would hold a thread (and its stack) for good.
  std::map<uint64_t, std::thread> conn_threads_;
  std::vector<uint64_t> finished_;
  uint64_t next_conn_ = 0;
};

}  // namespace gantry::shardserver
