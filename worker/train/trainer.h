// The single-process training loop of gantry-train: data, model, AdamW, schedule, clipping,
// evaluation, checkpoints, and the per-step report.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/loader.h"
#include "worker/data/token_file.h"
#include "worker/model/gpt.h"
#include "worker/parallel/communicator.h"
#include "worker/train/job_spec.h"
#include "worker/train/optimizer.h"
#include "worker/train/zero.h"

namespace gantry::train {

struct StepReport;

struct TrainOptions {
  std::string init_from;     // a Hugging Face GPT-2 directory to start from
  std::string save_dir;      // write the final model here (Hugging Face layout)
  bool resume = false;       // continue from the newest checkpoint in checkpoint.dir
  bool print_losses = false; // "step N loss X" with 9 significant digits
  bool progress = false;     // a progress bar with ETA on stderr
  int64_t stop_after = 0;    // stop once this step is done (as if preempted); 0 = run to the end
  FILE* out = stdout;
  // Hooks for the worker daemon. on_step returning false stops the run (Run() then answers
  // CANCELLED). At a checkpoint every rank writes its part and calls on_checkpoint_part
  // (with the part's directory and file name); once every rank has, rank 0 writes the
  // manifest, publishes the checkpoint and calls on_checkpoint with its path.
  std::function<bool(const StepReport&)> on_step;
  std::function<void(int64_t step, float val_loss)> on_eval;
  std::function<absl::Status(const std::string& dir, const std::string& file, int64_t step)> on_checkpoint_part;
  std::function<absl::Status(const std::string& path, int64_t step)> on_checkpoint;
  // Data parallelism: this rank's group (size = parallel.dp). Null for dp 1.
  parallel::Communicator* comm = nullptr;
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
};

class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const JobSpec& spec,
                                                         const TrainOptions& options);
  absl::Status Run();

  const std::vector<StepReport>& reports() const { return reports_; }
  const std::vector<std::pair<int64_t, float>>& val_losses() const { return val_losses_; }
  model::GPT& model() { return *model_; }
  // Bytes this rank held while training (as of the last step; before the first, at start),
  // with what the ZeRO formula predicts for its stage.
  MemoryAccount memory() const { return reports_.empty() ? engine_->memory() : step_memory_; }

  // Mean loss over the first `batches` windows of a token file.
  static float Evaluate(model::GPT& model, data::BatchLoader& loader, int B, int T, int batches);

 private:
  Trainer() = default;
  StepReport Step(int64_t step);
  void Print(const std::string& line);
  void DrawProgress(int64_t done, double elapsed);

  JobSpec spec_;
  TrainOptions options_;
  std::unique_ptr<model::GPT> model_;
  parallel::SoloCommunicator solo_;  // the group of one process when options.comm is null
  std::unique_ptr<ZeroEngine> engine_;  // after model_: destroyed first
  std::optional<data::TokenFile> train_file_, val_file_;
  std::optional<data::BatchLoader> train_loader_, val_loader_;
  std::vector<int32_t> inputs_, targets_;
  int64_t start_step_ = 0;
  std::vector<StepReport> reports_;
  std::vector<std::pair<int64_t, float>> val_losses_;
  bool bar_shown_ = false;
  absl::Status comm_status_;
  MemoryAccount step_memory_;
  // Every rank writes its part, rank 0 publishes (collective).
  absl::Status WriteCheckpoint(int64_t step);
};

}  // namespace gantry::train
