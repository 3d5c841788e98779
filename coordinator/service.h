// The Coordinator gRPC service (callback API): the job API used by the gantry CLI.
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/metrics.h"
#include "coordinator/store.h"
#include "gantry/v1/coordinator.grpc.pb.h"

namespace gantry::coordinator {

class CoordinatorService final : public v1::Coordinator::CallbackService {
 public:
  CoordinatorService(Store* store, metrics::Registry* registry);

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx, const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                   v1::Job* resp) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx, const v1::CancelJobRequest* req,
                                      v1::Job* resp) override;

  // Recomputes the jobs-by-state gauges from the store (at start and after each change).
  void RefreshJobGauges();

 private:
  template <typename F>
  grpc::ServerUnaryReactor* Handle(grpc::CallbackServerContext* ctx, const char* method, F&& f);
  absl::Status FillQueuePosition(v1::Job* job, const std::vector<v1::Job>* all);

  Store* store_;
  metrics::Registry* registry_;
  std::mutex mu_;  // serialises read-modify-write of jobs
};

// absl::Status and grpc::Status use the same codes.
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace gantry::coordinator
