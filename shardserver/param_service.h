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
#include <chrono>
#include <vector>

#include "absl/status/statusor.h"

#include "absl/status/status.h"
#include "common/buffer.h"
#include "kernels/adamw.h"
#include "common/metrics.h"
#include "common/principals.h"
#include "common/stream_server.h"
#include "gantry/v1/shardserver.grpc.pb.h"

namespace gantry::shardserver {

class ParamService final : public v1::ParamServer::CallbackService {
 public:
  explicit ParamService(metrics::Registry* registry) : registry_(registry) {}
  ~ParamService() override;

  // Serves pushes, reads and writes of payloads on a plain TCP port as well (common/param_wire.h's
  // protocol, on one event loop: common/stream_server.h): gRPC's per-byte cost is several
  // times a raw stream's. Returns "host:port" (the port picked by the system).
  //
  // Each request is authorised as the gRPC methods are (common/authz.h, Action::kParamServer,
  // for the request's job), as `callers`: the data port carries no TLS and no credentials, so
  // its connections name nobody. The daemon serves it only on a cluster with nothing configured
  // (no TLS, no token, no principals file: shardserver/main.cc), whose callers are all the
  // laptop's anonymous admin, the default; a test passes another identity to check the rule.
  absl::StatusOr<std::string> StartDataPort(const std::string& host, net::StreamServer::Options options = {},
                                            Principal callers = LaptopPrincipal());
  // Stops the data port: the listener and idle connections close at once, requests in
  // progress may finish within `grace`. The destructor stops it without grace.
  void StopDataPort(std::chrono::milliseconds grace);
  // The data port's server (null before StartDataPort): its connections and deadlines.
  const net::StreamServer* data_port() const { return data_port_.get(); }

  grpc::ServerUnaryReactor* InitRange(grpc::CallbackServerContext* ctx, const v1::InitRangeRequest* req,
                                      v1::InitRangeResponse* resp) override;
  grpc::ServerUnaryReactor* WriteParams(grpc::CallbackServerContext* ctx, const v1::ParamsChunk* req,
                                        v1::ParamsAck* resp) override;
  grpc::ServerUnaryReactor* PushGradients(grpc::CallbackServerContext* ctx, const v1::GradientChunk* req,
                                          v1::PushAck* resp) override;
  grpc::ServerUnaryReactor* ReadParams(grpc::CallbackServerContext* ctx, const v1::ReadParamsRequest* req,
                                       v1::ParamsChunk* resp) override;

 private:
  class DataSession;  // one data port connection's requests (param_service_data_port.cc)
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
    // Bumped by every change of params, m or v (a write, an AdamW step): a read that spans
    // several chunks sees whether the values changed under it.
    uint64_t changes = 0;
    bool retired = false;  // replaced by another InitRange: requests in flight on it fail
    // Local [begin, end) of the data port pushes whose payload is arriving, received straight
    // into grad outside mu: no other push may overlap them, and AdamW waits for none of them
    // (a step they would not complete is an overlap, refused).
    std::vector<std::pair<size_t, size_t>> arriving;
    std::mutex mu;
    size_t size() const { return end - begin; }
    FloatBuffer* Buffer(v1::RangeBuffer b) { return b == v1::ADAM_M ? &m : b == v1::ADAM_V ? &v : &params; }
  };
  // A push of n values already copied into r->grad at local index at: counts them and runs
  // AdamW when they complete the step (r->mu held).
  absl::Status CompletePushLocked(Range* r, int64_t step, double lr, size_t n, bool* applied);
  // A push of local [at, at + n) overlaps none arriving (r.mu held).
  static absl::Status CheckNotArrivingLocked(const Range& r, size_t at, size_t n);
  // A push of step `step`'s gradients is for the step the range expects next (r.mu held).
  static absl::Status CheckPushStepLocked(const Range& r, const std::string& job, int64_t step);
  // Values [offset, offset + n) inside the range; a gRPC payload of whole floats within the
  // message limit as well. Errors name what was sent and the range.
  static absl::Status CheckWithin(const Range& r, const char* what, int64_t offset, size_t n);
  static absl::Status CheckPayload(const Range& r, const char* what, int64_t offset, size_t bytes);
  // The job's range at this generation, or an error naming what does not match. Requests
  // hold it while they run: an InitRange that replaces it meanwhile retires it.
  absl::StatusOr<std::shared_ptr<Range>> Find(const std::string& job, int64_t generation);

  metrics::Registry* registry_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Range>> ranges_;  // by job
  Principal data_callers_;  // who the data port's requests are from (StartDataPort)
  std::unique_ptr<net::StreamServer> data_port_;  // declared last: stopped before the ranges go
};

}  // namespace gantry::shardserver
