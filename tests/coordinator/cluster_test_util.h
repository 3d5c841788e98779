// The coordinator's Cluster in process, for its tests: a fake worker session, jobs of a tiny
// model queued as SubmitJob queues them, and the whole gRPC service served on loopback.
#pragma once

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "common/rpc_edge.h"
#include "coordinator/cluster.h"
#include "coordinator/service.h"
#include "coordinator/store.h"
#include "jobspec/job_spec.h"
#include "tests/test_util.h"

namespace gantry::coordinator {

// A worker's attach stream as the cluster sees it: it keeps what the cluster sends.
class FakeSession : public WorkerSession {
 public:
  void Send(const v1::CoordinatorMessage& m) override {
    std::lock_guard<std::mutex> l(mu);
    got.push_back(m);
  }
  void End(const std::string& why) override {
    std::lock_guard<std::mutex> l(mu);
    ended = why;
  }
  bool Backlogged() override { return backlogged; }
  // Why the cluster ended this stream ("" while it has not).
  std::string Ended() {
    std::lock_guard<std::mutex> l(mu);
    return ended;
  }
  std::vector<v1::CoordinatorMessage> Take() {
    std::lock_guard<std::mutex> l(mu);
    return std::exchange(got, {});
  }
  // The assignment among messages, if any.
  static const v1::Assignment* Assigned(const std::vector<v1::CoordinatorMessage>& ms) {
    for (const auto& m : ms) {
      if (m.has_assign()) return &m.assign();
    }
    return nullptr;
  }
  std::mutex mu;
  std::vector<v1::CoordinatorMessage> got;
  std::string ended;
  std::atomic<bool> backlogged{false};  // messages read, not applied yet (the service's queue)
};

// The spec an assignment's ranks run, as a worker reads it (agent::AssignedSpec, which these
// tests do not link): the text as submitted, with the placement's typed layout applied.
inline absl::StatusOr<jobspec::JobSpec> RanksSpec(const v1::Assignment& a) {
  auto spec = jobspec::ParseJobSpec(a.spec_yaml());
  if (!spec.ok()) return spec.status();
  const v1::Layout& l = a.layout();
  return jobspec::ApplyLayout(*std::move(spec), {l.dp(), l.tp(), l.pp(), l.cp(), l.virtual_stages(), l.zero_stage(),
                                                  l.sequence_parallel(), l.micro_batch(), l.recompute()});
}

// Queues a job of a tiny model with world_size ranks, the spec's further sections in
// more_yaml (each a line), and lets the cluster place it (after before_placing, if given).
// fill sets more of the record before it is stored (its priority, as SubmitJob copies it).
// Returns its id.
inline std::string SubmitTinyJob(Cluster& cluster, Store& store, const std::string& name, int world_size,
                                 const std::string& more_yaml, const std::function<void()>& before_placing = {},
                                 const std::function<void(v1::Job&)>& fill = {}) {
  v1::Job j;
  j.set_name(name);
  j.set_state(v1::PENDING);
  j.set_world_size(world_size);
  j.set_steps_total(100);
  j.set_spec_yaml("model: {n_layer: 1, n_head: 1, n_embd: 8, vocab_size: 16, seq_len: 8}\n"
                  "data: {train: /nonexistent.bin}\n"
                  "train: {steps: 100, micro_batch: 1, lr: 1.0e-3}\n" +
                  more_yaml);
  if (fill) fill(j);
  const std::string id = *store.CreateJob(j);
  if (before_placing) before_placing();
  cluster.JobSubmitted();
  return id;
}

// The Cluster in process over a fresh store with no shard server (placement_grace_ms 0), for a
// test fixture to inherit: rank step reports, a job's record.
class InProcessCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *Store::Open(dir_.File("db"));
    ClusterOptions o;
    o.placement_grace_ms = 0;  // no shard server in these tests
    cluster_ = std::make_unique<Cluster>(store_.get(), &registry_, o);
  }
  // Rank 0 of (job, generation) on `worker` reports `step` done.
  void Step(const std::string& worker, const std::string& job, int64_t gen, int64_t step) {
    v1::StepUpdate u;
    u.set_job_id(job);
    u.set_generation(gen);
    u.mutable_report()->set_step(step);
    u.mutable_report()->set_loss(1.0f);
    cluster_->OnStep(worker, u);
  }
  v1::Job Job(const std::string& id) { return *store_->GetJob(id); }
  testing::TempDir dir_;
  metrics::Registry registry_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Cluster> cluster_;
};

// The coordinator's gRPC service on a loopback port (port 0) over the store at a path, with
// the RPC edge's interceptor, and a stub for it. Nothing is placed within a minute of a
// job's submission (placement_grace_ms_, unless a fixture sets it): listings see jobs as stored. StopServer then
// StartServer again on the same path is a coordinator restart. For a test fixture to inherit.
class ServedCoordinator {
 protected:
  void StartServer(const std::string& db) {
    store_ = *Store::Open(db);
    ClusterOptions o;
    o.placement_grace_ms = placement_grace_ms_;
    o.quotas = quotas_;
    cluster_ = std::make_unique<Cluster>(store_.get(), &registry_, o);
    service_ = std::make_unique<CoordinatorService>(store_.get(), cluster_.get(), &registry_);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service_.get());
    AddRpcEdge(b, &registry_, "coordinator");
    server_ = b.BuildAndStart();
    ASSERT_NE(port, 0);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);  // a listing's page of 1000 full jobs
    stub_ = v1::Coordinator::NewStub(grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                                               grpc::InsecureChannelCredentials(), args));
  }
  void StopServer() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
    server_.reset();
    service_.reset();
    cluster_.reset();
    store_.reset();
  }

  // How long after its start the cluster places nothing without a shard server (0: at once).
  int64_t placement_grace_ms_ = 60000;
  // The teams' quotas the cluster is given (ClusterOptions::quotas); unset: none.
  std::function<std::shared_ptr<const TeamQuotas>()> quotas_;
  metrics::Registry registry_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<CoordinatorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace gantry::coordinator
