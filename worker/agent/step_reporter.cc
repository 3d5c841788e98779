#include "worker/agent/step_reporter.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "jobspec/model_layout.h"
#include "worker/protocol/messages.h"

namespace gantry::agent {

StepReporter::StepReporter(const v1::Assignment& a, const jobspec::JobSpec& spec, metrics::Registry* registry,
                           double peak_flops, SendFn send)
    : a_(a), registry_(registry), peak_flops_(peak_flops), send_(std::move(send)) {
  rank_tokens_per_step_ = static_cast<double>(spec.train.global_batch) * spec.seq_len / spec.world_size();
  double n_params = 0;
  for (const auto& t : jobspec::ParameterLayout(spec.model)) n_params += static_cast<double>(t.numel);
  flops_per_token_ = 6 * n_params + 6.0 * spec.model.n_layer * spec.model.n_embd * spec.seq_len;
  local_world_ = std::max(1, a.local_world());
}

void StepReporter::Eval(int64_t step, float val_loss) {
  if (step > 0) {
    val_ = val_loss;  // goes out with this step's report
    return;
  }
  v1::WorkerMessage m;  // before training: a report of its own, step 0
  v1::StepReport* rep = protocol::SetStepUpdate(a_, &m);
  rep->set_step(0);
  rep->set_loss(NAN);
  rep->set_val_loss(val_loss);
  if (a_.rank() == 0) send_(m);
}

void StepReporter::Step(const train::StepReport& r) {
  const v1::WorkerMessage m = Report(r);
  if (a_.rank() == 0) send_(m);
  if (a_.local_rank() == 0) Publish(r);
}

v1::WorkerMessage StepReporter::Report(const train::StepReport& r) {
  v1::WorkerMessage m;
  v1::StepReport* rep = protocol::SetStepUpdate(a_, &m);
  rep->set_step(r.step);
  rep->set_loss(r.loss);
  rep->set_lr(r.lr);
  rep->set_grad_norm(r.grad_norm);
  rep->set_step_seconds(r.seconds);
  rep->set_tokens_per_second(r.tokens_per_second);
  rep->set_compute_seconds(r.compute_seconds);
  rep->set_comm_seconds(r.comm_seconds);
  rep->set_optimizer_seconds(r.optimizer_seconds);
  rep->set_val_loss(val_ ? *val_ : NAN);
  rep->set_loss_scale(r.loss_scale);
  rep->set_skipped(r.skipped);
  rep->set_skipped_steps(r.skipped_steps);
  rep->set_offload_bytes(static_cast<int64_t>(r.offload_bytes));
  rep->set_moe_forwards(r.moe_forwards);
  rep->set_moe_aux(r.moe_aux);
  rep->set_moe_z(r.moe_z);
  rep->set_moe_assignments(r.moe_assignments);
  rep->set_moe_dropped(r.moe_dropped);
  for (int64_t t : r.moe_tokens_per_expert) rep->add_moe_tokens_per_expert(t);
  for (const std::string& n : r.notes) rep->add_notes(n);
  val_.reset();
  return m;
}

void StepReporter::Publish(const train::StepReport& r) {
  metrics::Registry& reg = *registry_;
  reg.GetGauge("gantry_worker_tokens_per_second", "This worker's training throughput in the last step.")
      .Set(rank_tokens_per_step_ * local_world_ / r.seconds);
  reg.GetGauge("gantry_worker_loss", "Training loss of the last step.").Set(r.loss);
  reg.GetHistogram("gantry_worker_step_seconds", "Training step time.", metrics::ExponentialBuckets(0.001, 2, 16))
      .Observe(r.seconds);
  reg.GetCounter("gantry_worker_steps_total", "Training steps done.").Increment();
  if (r.moe_forwards > 0) {  // this rank's MoE layers
    reg.GetGauge("gantry_worker_moe_aux_loss", "Load-balancing loss of the last step (summed over MoE layers).")
        .Set(r.moe_aux);
    reg.GetGauge("gantry_worker_moe_z_loss", "Router z-loss of the last step (summed over MoE layers).").Set(r.moe_z);
    reg.GetCounter("gantry_worker_moe_assignments_total", "Token-expert assignments routed.")
        .Increment(static_cast<double>(r.moe_assignments));
    reg.GetCounter("gantry_worker_moe_dropped_total", "Token-expert assignments dropped over capacity.")
        .Increment(static_cast<double>(r.moe_dropped));
    for (size_t e = 0; e < r.moe_tokens_per_expert.size(); ++e) {
      reg.GetCounter("gantry_worker_moe_tokens_total", "Tokens routed to each expert (over MoE layers).",
                     {{"expert", std::to_string(e)}})
          .Increment(static_cast<double>(r.moe_tokens_per_expert[e]));
    }
  }
  if (r.offload_bytes > 0) {
    reg.GetCounter("gantry_worker_offload_bytes_total",
                   "Bytes moved between host and device for the offloaded optimizer's updates.")
        .Increment(static_cast<double>(r.offload_bytes));
  }
  if (r.loss_scale > 0) {  // fp16
    reg.GetGauge("gantry_worker_loss_scale", "fp16 dynamic loss scale of the last step.").Set(r.loss_scale);
    auto& skipped = reg.GetCounter("gantry_worker_skipped_steps_total",
                                   "Steps whose update an fp16 overflow (inf/NaN gradients) skipped.");
    if (r.skipped) skipped.Increment();
  }
  if (r.checkpoint_stall_seconds > 0) {
    reg.GetHistogram("gantry_worker_checkpoint_stall_seconds",
                     "Time the step loop spent on a checkpoint (the copy, or waiting for the budget).",
                     metrics::ExponentialBuckets(0.0001, 2, 18))
        .Observe(r.checkpoint_stall_seconds);
  }
  for (auto [part, secs] : {std::pair{"compute", r.compute_seconds}, std::pair{"comm_exposed", r.comm_seconds},
                            std::pair{"optimizer", r.optimizer_seconds}, std::pair{"comm_busy", r.comm_busy_seconds}}) {
    reg.GetGauge("gantry_worker_step_part_seconds",
                 "The last step's time by part: compute, exposed communication, optimizer; comm_busy is "
                 "the communication thread's time, overlapped with compute or not.",
                 {{"part", part}})
        .Set(secs);
  }
  if (peak_flops_ > 0) {  // set in main: the flag, or the CPU rate measured at start
    reg.GetGauge("gantry_worker_mfu_ratio", "Model FLOPs utilisation, (6N + 6LCT) x tokens/s / peak.")
        .Set(flops_per_token_ * rank_tokens_per_step_ / r.seconds / peak_flops_);
  }
}

}  // namespace gantry::agent
