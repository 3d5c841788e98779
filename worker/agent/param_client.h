// The worker's side of parameter-server mode: a train::RemoteOptimizer over the shard
// servers of a partition map.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/stream_client.h"
#include "gantry/v1/shardserver.grpc.pb.h"
#include "jobspec/partition.h"
#include "model/gpt.h"
#include "optim/adamw.h"
#include "worker/train/remote_params.h"

namespace gantry::agent {

class ParamServerClient final : public train::RemoteOptimizer {
 public:
  ParamServerClient(std::string job_id, int64_t generation, std::vector<jobspec::ParamRangeOf> ranges,
                    const std::vector<jobspec::ParamTensor>& tensors, size_t num_params, kernels::AdamWConfig config);
  ~ParamServerClient() override;

  absl::Status Init(const float* params, const float* m, const float* v, int64_t step) override;
  absl::Status Push(int step, double lr, const float* grads, size_t begin, size_t end) override;
  absl::Status Pull(float* params) override;
  absl::Status ReadState(size_t begin, size_t end, float* m, float* v) override;

 private:
  struct Server {
    jobspec::ParamRangeOf range;
    std::unique_ptr<v1::ParamServer::Stub> stub;
    std::unique_ptr<net::StreamClient> data;  // the data port connection, opened on first use
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
  kernels::AdamWConfig config_;
};

}  // namespace gantry::agent
