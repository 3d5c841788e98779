// One job's ranks on this worker, as the coordinator assigned them: the session of an
// attach stream runs each assignment (spec, groups, resume point, checkpoint streaming,
// step reports) to its end, and answers heartbeats with where the running job is. A worker
// with several GPUs runs several ranks of one job at once, each assignment on its own
// thread and on the device its local rank names.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "common/metrics.h"
#include "gantry/v1/coordinator.grpc.pb.h"
#include "kernels/backend.h"
#include "jobspec/job_spec.h"
#include "checkpoint/remote/shard_source.h"
#include "comm/communicator.h"
#include "comm/groups.h"
#include "worker/agent/step_reporter.h"
#include "worker/train/device.h"
#include "worker/train/trainer.h"

namespace gantry::agent {

// What a worker is, from its flags (worker/main.cc).
struct WorkerOptions {
  std::string coordinator = "127.0.0.1:7070";
  std::string host;       // reported host name; empty: this machine's
  std::string work_dir;   // the jobs' scratch directory
  std::string device = "cpu";  // a cuda kind: the first GPU's ordinal (local rank 0's)
  kernels::AttentionPath attention = kernels::AttentionPath::kAuto;  // cuda kinds (kernels/backend.h)
  int gpus = 0;                 // GPUs offered (cuda kinds); 0: those visible (cuda), 1 (cuda-emulated)
  std::string gloo_host = "127.0.0.1";  // where this worker's collectives listen
  int threads = 0;                       // 0: all the process may use
  int heartbeat_ms = 1000;
  int collective_timeout_ms = 30000;
  double peak_flops = 0;  // for MFU; 0: not reported
};

using AttachStream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;

class Session {
 public:
  Session(const WorkerOptions& options, AttachStream* stream, metrics::Registry* registry,
          std::shared_ptr<v1::Coordinator::Stub> stub, const std::atomic<bool>* stop)
      : options_(options), stream_(stream), registry_(registry), stub_(std::move(stub)), stop_(stop) {}

  bool Send(const v1::WorkerMessage& m);
  // Runs one assignment (one rank) to the end (or until cancelled), reporting as it goes.
  // Several ranks of one job run at once, each on its own thread.
  void Run(const v1::Assignment& a);
  // What a heartbeat says of the running job: placement, and each rank's last step and
  // last collective.
  void FillHeartbeat(v1::Heartbeat* hb);
  // Ends the running job's placement: its step loops stop at the next step and a collective
  // in flight fails at once rather than wait out its timeout.
  void Abort();
  // The placement (job, generation) is preempted: its ranks checkpoint after stop_step and stop
  // (their JobDone says preempted).
  void Preempt(const std::string& job_id, int64_t generation, int64_t stop_step);

  std::atomic<bool> cancel{false};

 private:
  struct RankState {
    std::vector<comm::Communicator*> comms;  // its groups, while they live (comm_mu_)
    std::atomic<int64_t> step{0};
  };
  // *preempted: it stopped at its preemption's step, after that step's checkpoint.
  absl::Status Train(const v1::Assignment& a, RankState* rank, bool* preempted);
  // The checkpoint the coordinator chose for the ranks to start from, located on the shard
  // servers (none for a fresh start).
  absl::StatusOr<std::optional<shardserver::StoredCheckpoint>> FindResumePoint(const v1::Assignment& a);
  // Joins this rank's process groups (world > 1; null otherwise) and sets o.groups.
  absl::StatusOr<std::unique_ptr<comm::Groups>> JoinGroups(const v1::Assignment& a, const jobspec::JobSpec& spec,
                                                           const train::DeviceName& device, RankState* rank,
                                                           train::TrainOptions* o);
  // The hook that streams this rank's checkpoint parts to the shard servers and tells the
  // coordinator; slice_server[s] holds slice s.
  void SetCheckpointHook(const v1::Assignment& a, const std::vector<std::string>& slice_server, train::TrainOptions* o);
  // The step and evaluation hooks: the reports (to the coordinator and /metrics), the rank's
  // step for heartbeats, and whether the run goes on.
  void SetStepHooks(RankState* rank, StepReporter* reporter, train::TrainOptions* o);
  void SetMemoryGauges(const v1::Assignment& a, const train::MemoryAccount& m);
  void Unreachable(const std::string& server);

  const WorkerOptions& options_;
  AttachStream* stream_;
  metrics::Registry* registry_;
  std::shared_ptr<v1::Coordinator::Stub> stub_;
  const std::atomic<bool>* stop_;
  std::mutex write_mu_;
  std::mutex comm_mu_;
  std::set<std::string> unreachable_;  // shard servers this run could not reach (comm_mu_)
  std::string hb_job_;                 // the running job's placement, for heartbeats (comm_mu_)
  int64_t hb_generation_ = 0;
  std::map<int, std::unique_ptr<RankState>> ranks_;  // its ranks running here (comm_mu_)
  // The preemption of the placement it runs, if any (comm_mu_): stop after this step.
  std::string preempt_job_;
  int64_t preempt_generation_ = -1, preempt_step_ = 0;
  // Whether (job, generation) is preempted, its stop step reached at `step`.
  bool StopHere(const v1::Assignment& a, int64_t step);
};

}  // namespace gantry::agent
