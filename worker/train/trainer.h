// A rank's training loop, for gantry-train and the worker daemon alike: data, model, AdamW,
// schedule, clipping, evaluation, checkpoints, and the per-step report.
#pragma once

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/token_file.h"
#include "model/gpt.h"
#include "comm/communicator.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/writer.h"
#include "worker/train/console.h"
#include "worker/train/device.h"
#include "optim/loss_scale.h"
#include "jobspec/job_spec.h"
#include "comm/groups.h"
#include "optim/adamw.h"
#include "jobspec/pipeline.h"
#include "worker/train/zero.h"

namespace gantry::train {

struct StepReport;

// What the worker daemon adds to a run (worker/agent/session.cc): where it resumes, how its
// checkpoints are cut and where they go, the optimizer on the shard servers, and the hooks it
// reports and stops through. gantry-train leaves it empty; tests fill parts of it to run as
// the worker does.
struct WorkerHooks {
  // Continue from this checkpoint rather than the newest in checkpoint.dir: one on the shard
  // servers, of which a rank reads only the ranges it needs.
  checkpoint::CheckpointSource* resume_source = nullptr;
  // The partition map's interior bounds (flat parameter index, ascending): each rank's
  // checkpoint part is cut there, one file per shard server's range.
  std::vector<size_t> checkpoint_cuts;
  // Parameter-server mode (optimizer.placement: shardserver): the shard servers' optimizer.
  RemoteOptimizer* remote_optimizer = nullptr;
  // Asked after each step (a preemption): true checkpoints that step (whatever
  // checkpoint.every says) and stops the run there, as stop_after does; stopped_early() says so.
  std::function<bool(int64_t step)> stop_here;
  // After each step; false stops the run (Run() then answers CANCELLED).
  std::function<bool(const StepReport&)> on_step;
  // After each evaluation (step 0: before training).
  std::function<void(int64_t step, float val_loss)> on_eval;
  // Checkpoints. With on_checkpoint_part set, they are asynchronous: at a checkpoint the step
  // loop copies this rank's pieces into host memory (within checkpoint.host_budget_mb; beyond
  // it the loop waits for earlier writes, and a copy that alone exceeds it is sent from the
  // live buffers) and goes on. A writer thread lays the part's files over that copy in memory
  // (rank 0 adds the manifest and config.json) and calls on_checkpoint_part(files, step),
  // which makes them durable: the worker streams them to the shard servers (nothing is
  // written to local disk) and tells the coordinator, which commits the checkpoint once every
  // rank's part is in. The files' bytes live until the hook returns.
  // Without the hook (gantry-train), one rank also writes asynchronously and publishes the
  // checkpoint in checkpoint.dir; several ranks in one process write synchronously (barrier,
  // every part, barrier, rank 0 publishes).
  std::function<absl::Status(const std::vector<checkpoint::CheckpointFile>& files, int64_t step)> on_checkpoint_part;
};

// How a run starts: gantry-train's flags (cli/train), this rank's process groups, and what the
// worker daemon adds.
struct TrainOptions {
  std::string init_from;     // a Hugging Face GPT-2 or Llama directory to start from
  std::string save_dir;      // write the final model here (Hugging Face layout)
  bool resume = false;       // continue from the newest checkpoint in checkpoint.dir
  // Where the model lives and its ops run (train/device.h, kernels/backend.h): "cpu",
  // "cuda[:N]" or "cuda-emulated[:N]"; every layout on each.
  std::string device = "cpu";
  DeviceOptions device_options;  // how an accelerator runs (its attention path)
  bool print_losses = false; // "step N loss X" with 9 significant digits
  bool progress = false;     // a progress bar with ETA on stderr
  int64_t stop_after = 0;    // stop once this step is done (as if preempted); 0 = run to the end
  FILE* out = stdout;
  // This rank's process groups (comm/groups.h): MakeGroups' for any layout, or
  // DataParallelGroups over one communicator for a data-parallel-only job. Their layout must
  // be the job spec's parallel section. Null: one rank alone.
  comm::Groups* groups = nullptr;
  WorkerHooks worker;
};

struct StepReport {
  int64_t step = 0;  // 1-based
  float loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;
  double tokens_per_second = 0;
  // The step's time split: compute = seconds - exposed_comm - optimizer.
  double compute_seconds = 0;
  double comm_seconds = 0;       // exposed communication (the training thread waiting)
  double optimizer_seconds = 0;  // clipping and AdamW
  double comm_busy_seconds = 0;  // the communication thread's time, overlapped or not
  double checkpoint_stall_seconds = 0;  // the step loop's time for a checkpoint taken after this step
  // Pipeline parallel: the fraction of the pipeline's time (the slowest stage's schedule) this stage did not compute
  // (waiting for its neighbours), next to (p - 1) / (m + p - 1) for balanced stages.
  double bubble = 0;
  // fp16 loss scaling (0 and false otherwise): the scale this step's loss was multiplied by,
  // whether an inf or NaN in its gradients skipped its update, and the steps skipped so far.
  double loss_scale = 0;
  bool skipped = false;
  int64_t skipped_steps = 0;
  // optimizer.offload: bytes this rank moved between host and device for its update.
  size_t offload_bytes = 0;
  // Mixture of experts, this rank's MoE layers (moe_forwards 0 without any): the load-balancing
  // and z losses (summed over the layers, the mean over the step's micro-batches), the
  // token-expert assignments and those dropped over capacity, and the tokens each expert was
  // routed (summed over the layers and micro-batches).
  int moe_forwards = 0;
  double moe_aux = 0, moe_z = 0;
  int64_t moe_assignments = 0, moe_dropped = 0;
  std::vector<int64_t> moe_tokens_per_expert;
  // The backend's notices of this step (kernels::Backend::TakeNotices): a library's refusal
  // and the path taken instead, each once a run.
  std::vector<std::string> notes;
};

class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const jobspec::JobSpec& spec,
                                                         const TrainOptions& options);
  absl::Status Run();

  const std::vector<StepReport>& reports() const { return reports_; }
  // Pipeline parallel: this stage's schedule of a step, and the seconds each of its computes took
  // in the last step (0 for the transfers), as jobspec::SimulatePipeline takes them.
  const std::vector<jobspec::PipeOp>& pipeline_ops() const { return ops_; }
  const std::vector<double>& pipeline_op_seconds() const { return op_seconds_; }
  const std::vector<std::pair<int64_t, float>>& val_losses() const { return val_losses_; }
  model::GPT& model() { return *model_; }
  // The run stopped at a step WorkerHooks::stop_here chose (after that step's checkpoint).
  bool stopped_early() const { return stopped_early_; }
  // Bytes this rank held while training (as of the last step; before the first, at start),
  // with what the ZeRO formula predicts for its stage.
  MemoryAccount memory() const { return reports_.empty() ? engine_->memory() : step_memory_; }
  ~Trainer();

  // Mean loss over the first `batches` windows of a token file.
  static absl::StatusOr<float> Evaluate(model::GPT& model, const data::Dataset& data, int B, int T, int batches);

 private:
  Trainer() = default;
  // What Create builds, in its order (each reads what the ones before it built).
  // This rank's groups (the caller's, or those of one rank alone), held to the job spec's layout.
  absl::Status TakeGroups();
  // The token files, and this rank's share of each batch: its replica's rows, and under
  // context parallelism its rows of each sequence.
  absl::Status OpenData();
  // The backend the model runs on: the host's cpu backend, or one this trainer owns.
  absl::StatusOr<kernels::Backend*> CreateDevice();
  // The model on it (the rank's shard under tp, pp or ep), its starting weights, precision and
  // collectives, and the pipeline's schedule.
  absl::Status CreateModel(kernels::Backend* backend);
  // ZeRO over the ranks that hold the same parameters, and where AdamW runs.
  absl::Status CreateEngine();
  // A checkpoint's parameters, optimizer state, data position and loss scale, when the run
  // resumes (WorkerHooks::resume_source, or --resume's newest in checkpoint.dir).
  absl::Status Resume();
  // The engine shards what the model holds and the model reserves its activations: ready to step.
  absl::Status ReadyToStep();
  // The console's lines and the checkpoint writer's thread.
  void CreateWriters();
  // Tensor, pipeline or expert parallelism: this rank holds a shard of the model.
  bool shards_model() const;
  // ...or context parallelism: the groups inside a replica take part (evaluation through them).
  bool splits_replica() const;
  StepReport Step(int64_t step);
  // Pipeline parallel: this stage's part of a step's forward and backward (the schedule);
  // returns the summed loss of the micro-batches (the last stage; 0 elsewhere).
  double PipelineStep(int64_t step, double* bubble);
  // The ranks of this job that speak (print, publish): rank 0 of the world.
  bool speaker() const;
  int world_rank() const;
  int world_size() const;
  checkpoint::CheckpointLayout Layout() const {
    // (engine_->dp(): the ranks ZeRO shards over, dp x cp.)
    return {engine_->dp() / spec_.parallel.cp, engine_->stage(), spec_.parallel.tp, spec_.parallel.pp,
            spec_.parallel.ep, spec_.parallel.cp};
  }
  // The mean validation loss of the loader's first batches, through the pipeline.
  absl::StatusOr<float> PipelineEval(int B, int T);
  void Print(const std::string& line) { console_->Print(line); }

  jobspec::JobSpec spec_;
  TrainOptions options_;
  std::unique_ptr<comm::Groups> alone_;  // the groups of one rank alone, where options_.groups is null
  comm::Groups* groups_ = nullptr;       // never null after TakeGroups
  jobspec::Schedule schedule_ = jobspec::Schedule::k1F1B;
  std::vector<jobspec::PipeOp> ops_;  // this stage's schedule of a step (pp > 1)
  std::vector<double> op_seconds_;     // the last step's, op by op
  int slots_ = 1;
  std::unique_ptr<kernels::Backend> backend_;  // the model's, unless cpu (before model_: outlives it)
  std::unique_ptr<model::GPT> model_;
  comm::SoloCommunicator solo_;  // ZeRO's group where no other rank holds these parameters
  optim::LossScaler scaler_;  // fp16: dynamic loss scaling (disabled otherwise)
  // fp16: the scaler's state at each checkpoint step not yet written (the writer thread reads it).
  std::mutex scale_mu_;
  std::map<int64_t, optim::LossScaleState> scale_at_;
  checkpoint::CheckpointState StateAt(int64_t step);
  std::unique_ptr<ZeroEngine> engine_;  // after model_: destroyed first
  // Device runs: the host model and AdamW state take the device's (checkpoints, the end).
  float EvalLoss(int B, int T);
  std::unique_ptr<data::Dataset> train_data_, val_data_;
  // The data position: step s's first row read is rows_base_ + (s - step_base_) * global
  // batch (a resumed run's from its checkpoint, so a changed global batch continues the rows).
  int64_t rows_base_ = 0, step_base_ = 0;
  int64_t RowsAt(int64_t step) const;
  std::vector<int32_t> inputs_, targets_;
  // The batch's split: the data-parallel degree and this rank's replica (a replica's cp ranks
  // read the same sequences).
  int data_dp_ = 1, data_rank_ = 0;
  // Context parallelism (parallel.cp > 1): this rank's rows of each sequence, and its share of
  // the micro-batch's inputs and targets.
  std::optional<model::CpSharding> cp_shard_;
  std::vector<int32_t> cp_inputs_, cp_targets_;
  // A micro-batch of B sequences of T: under context parallelism, *inputs and *targets become
  // this rank's rows of them (in cp_inputs_, cp_targets_). Returns the rows a sequence (T / cp).
  int TakeRows(const int32_t** inputs, const int32_t** targets, int B, int T);
  int64_t start_step_ = 0;
  bool stopped_early_ = false;
  std::vector<StepReport> reports_;
  std::vector<std::pair<int64_t, float>> val_losses_;
  absl::Status comm_status_;
  MemoryAccount step_memory_;
  // Every rank writes its part, rank 0 publishes (collective).
  absl::Status WriteCheckpoint(int64_t step);
  // What writing this rank's part of a checkpoint means: streamed from memory to the hook
  // (the worker), or a local directory published here (one rank, gantry-train).
  absl::Status WritePart(int64_t step, const std::vector<checkpoint::CheckpointPiece>& pieces);
  std::unique_ptr<Console> console_;
  std::unique_ptr<checkpoint::CheckpointWriter> writer_;  // last: its thread ends first, writing what is queued
};

}  // namespace gantry::train
