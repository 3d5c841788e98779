// The worker's side of parameter-server mode: a train::RemoteOptimizer over the shard
// servers of a partition map.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gantry/v1/shardserver.grpc.pb.h"
#include "worker/model/gpt.h"
#include "worker/train/optimizer.h"
#include "worker/train/zero.h"

namespace gantry::agent {

struct ParamRangeOf {
  std::string shard_server;
  size_t begin = 0, end = 0;
  std::string data_address;  // the server's raw TCP data port: pushes and pulls go there (else gRPC)
};

// The partition map: [0, num_params) split over the servers in order, balanced by bytes,
// the cuts aligned to `align` elements (1 MiB of fp32 by default; 4 KiB for a model too
// small to give each server a block). A server may get an empty range when there are more
// servers than blocks.
std::vector<ParamRangeOf> PartitionParams(size_t num_params, const std::vector<std::string>& servers,
                                          size_t align = size_t{1} << 18);

class ParamServerClient final : public train::RemoteOptimizer {
 public:
  ParamServerClient(std::string job_id, int64_t generation, std::vector<ParamRangeOf> ranges,
                    const std::vector<model::ParamTensor>& tensors, size_t num_params, train::AdamWConfig config);
  ~ParamServerClient() override;

  absl::Status Init(const float* params, const float* m, const float* v, int64_t step) override;
  absl::Status Push(int step, double lr, const float* grads, size_t begin, size_t end) override;
  absl::Status Pull(float* params) override;
  absl::Status ReadState(size_t begin, size_t end, float* m, float* v) override;

 private:
  struct Server {
    ParamRangeOf range;
    std::unique_ptr<v1::ParamServer::Stub> stub;
    int fd = -1;  // the data port connection, opened on first use
  };
  // One request on the data port: payload out (kPush, kWrite) or in (kRead).
  absl::Status DataRequest(Server& s, uint32_t op, v1::RangeBuffer which, int64_t step, double lr, size_t at,
                           size_t n, const float* out, float* in);
  // One buffer of flat elements [begin, end) of one server's range: read into out + (i -
  // out_begin), or written from src + (i - src_begin).
  absl::Status Read(Server& s, v1::RangeBuffer which, size_t begin, size_t end, float* out, size_t out_begin);
  absl::Status Write(Server& s, v1::RangeBuffer which, const float* src);
  std::string job_id_;
  int64_t generation_;
  std::vector<Server> servers_;
  std::vector<std::pair<size_t, size_t>> decay_;  // flat ranges with weight decay
  size_t num_params_;
  train::AdamWConfig config_;
};

}  // namespace gantry::agent
