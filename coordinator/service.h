// The Coordinator gRPC service (callback API): the job API of the gantry CLI, the workers'
// attach stream, job watching, and shard-server registration.
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/grpc_util.h"
#include "common/metrics.h"
#include "coordinator/cluster.h"
#include "coordinator/store.h"
#include "gantry/v1/coordinator.grpc.pb.h"

namespace gantry::coordinator {

class CoordinatorService final : public v1::Coordinator::CallbackService {
 public:
  CoordinatorService(Store* store, Cluster* cluster, metrics::Registry* registry);

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx, const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                   v1::Job* resp) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override;
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx, const v1::CancelJobRequest* req,
                                      v1::Job* resp) override;
  grpc::ServerWriteReactor<v1::JobEvent>* WatchJob(grpc::CallbackServerContext* ctx,
                                                   const v1::WatchJobRequest* req) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* ctx, const v1::ListWorkersRequest* req,
                                        v1::ListWorkersResponse* resp) override;
  grpc::ServerBidiReactor<v1::WorkerMessage, v1::CoordinatorMessage>* Attach(
      grpc::CallbackServerContext* ctx) override;
  grpc::ServerUnaryReactor* RendezvousPut(grpc::CallbackServerContext* ctx, const v1::RendezvousPutRequest* req,
                                          v1::RendezvousPutResponse* resp) override;
  grpc::ServerUnaryReactor* RendezvousGet(grpc::CallbackServerContext* ctx, const v1::RendezvousGetRequest* req,
                                          v1::RendezvousGetResponse* resp) override;
  grpc::ServerUnaryReactor* RegisterShardServer(grpc::CallbackServerContext* ctx,
                                                const v1::RegisterShardServerRequest* req,
                                                v1::RegisterShardServerResponse* resp) override;
  grpc::ServerUnaryReactor* ListShardServers(grpc::CallbackServerContext* ctx,
                                             const v1::ListShardServersRequest* req,
                                             v1::ListShardServersResponse* resp) override;

 private:
  absl::Status FillQueuePosition(v1::Job* job, const std::vector<v1::Job>* all);

  Store* store_;
  Cluster* cluster_;
  metrics::Registry* registry_;
};

}  // namespace gantry::coordinator
