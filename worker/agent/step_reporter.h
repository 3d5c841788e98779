// What a rank tells of its training, as the trainer's hooks hand it over (Session::Train wires
// them): each step's report up the attach stream to the coordinator (its events, `gantry
// watch`), with the last evaluation's loss; and the worker's series on /metrics.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "common/metrics.h"
#include "gantry/v1/coordinator.pb.h"
#include "jobspec/job_spec.h"
#include "worker/train/trainer.h"

namespace gantry::agent {

class StepReporter {
 public:
  // Sends a message up the attach stream (Session::Send).
  using SendFn = std::function<bool(const v1::WorkerMessage&)>;
  // a: the rank's assignment. peak_flops: a device's rate for the MFU gauge (0: none).
  StepReporter(const v1::Assignment& a, const jobspec::JobSpec& spec, metrics::Registry* registry, double peak_flops,
               SendFn send);

  // An evaluation's loss goes out with the next step's report; the one before training
  // (step 0) in a report of its own.
  void Eval(int64_t step, float val_loss);
  // A step done: its report (rank 0 speaks for the job: every rank holds the same loss), and
  // the worker's series (local rank 0's: the worker's ranks step together).
  void Step(const train::StepReport& r);

 private:
  v1::WorkerMessage Report(const train::StepReport& r);
  void Publish(const train::StepReport& r);

  const v1::Assignment a_;
  metrics::Registry* registry_;
  double peak_flops_;
  SendFn send_;
  double rank_tokens_per_step_;  // this rank's share of a step's tokens: MFU is per device
  double flops_per_token_;       // 6N + 6LCT
  int local_world_;              // the worker's ranks of this job (its tokens/s is theirs)
  std::optional<float> val_;     // the last evaluation, not sent yet
};

}  // namespace gantry::agent
