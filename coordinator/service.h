// The Coordinator gRPC service (callback API): the job API of the gantry CLI, the workers'
// attach stream, job watching, and shard-server registration.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <map>
#include <string>
#include <utility>

#include "common/executor.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "coordinator/cluster.h"
#include "coordinator/store.h"
#include "gantry/v1/coordinator.grpc.pb.h"

namespace gantry::coordinator {

class CoordinatorService final : public v1::Coordinator::CallbackService {
 public:
  CoordinatorService(Store* store, Cluster* cluster, metrics::Registry* registry);
  // Runs the calls and session work queued (the server is shut down first).
  ~CoordinatorService();

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
  grpc::ServerUnaryReactor* WhoAmI(grpc::CallbackServerContext* ctx, const v1::WhoAmIRequest* req,
                                   v1::WhoAmIResponse* resp) override;
  grpc::ServerUnaryReactor* GetQuotas(grpc::CallbackServerContext* ctx, const v1::GetQuotasRequest* req,
                                      v1::GetQuotasResponse* resp) override;

 private:
  // Queue position and "waiting for" of a queued job; positions: every queued job's place
  // (Cluster::QueuePositions), or null to look this one up.
  using QueuePositions = std::map<std::string, std::pair<int64_t, std::string>>;
  absl::Status FillQueuePosition(v1::Job* job, const QueuePositions* positions);

  // A unary method whose body (returning absl::Status; body() or body(principal), the
  // caller's, as ServeUnary's) may wait for locks or the store: run on calls_, never on
  // gRPC's threads.
  template <typename F>
  grpc::ServerUnaryReactor* ServeSlow(grpc::CallbackServerContext* ctx, F body);

  // Threads for the calls' bodies and for the workers' messages. They mostly wait (for the
  // job lock, a WAL sync), so there are many more than cores: a listing of 10,000 jobs or a
  // SubmitJob waiting for its WAL sync does not hold back the calls behind it, and
  // concurrent synced writes share one WAL sync (RocksDB's group commit).
  static constexpr int kCallThreads = 16;
  static constexpr int kSessionThreads = 8;

  Store* store_;
  Cluster* cluster_;
  metrics::Registry* registry_;
  Executor calls_;
  Executor sessions_work_;
  SerialQueues sessions_;  // each attach stream's messages, in order
  std::atomic<uint64_t> next_session_{1};
};

}  // namespace gantry::coordinator
