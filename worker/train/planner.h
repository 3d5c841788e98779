// The planner: how many bytes a layout needs per GPU (or CPU worker), before running it.
// Model states by the ZeRO paper's accounting (Rajbhandari et al. 2020), activations by
// Megatron's (Korthikanti et al. 2022) for mixed precision and exactly by
// model::LayoutActivations for Gantry's fp32 model, the pipeline bubble of 1F1B, and the
// bytes each step communicates. `gantry plan` prints it; `gantry submit` refuses a job that
// cannot fit its workers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/gpt.h"
#include "worker/train/job_spec.h"

namespace gantry::train {

enum class Precision {
  kFp32,   // Gantry's CPU and fp32 GPU paths: params, grads, m, v in fp32 (4 + 4 + 8 bytes)
  kMixed,  // bf16/fp16 params and grads + fp32 master, m, v (2 + 2 + 12 = 16 bytes)
};

struct PlanInput {
  double params = 0;                        // parameters; 0: from the model's shape
  std::optional<model::GPTConfig> model;    // the shape (activations need it)
  int seq_len = 1024;
  Precision precision = Precision::kMixed;
  bool fp32_grad_accum = false;             // mixed: an fp32 gradient accumulation buffer (+4 bytes)
  int zero = 0, tp = 1, pp = 1, dp = 1;
  int micro_batch = 1;
  int microbatches = 1;                     // per step and pipeline (gradient accumulation)
  model::Recompute recompute = model::Recompute::kNone;
  double device_memory = 0;                 // bytes per GPU; 0: unknown
};

struct Plan {
  double params = 0, grads = 0, optimizer = 0, activations = 0;  // bytes per GPU
  double model_state() const { return params + grads + optimizer; }
  double total() const { return model_state() + activations; }
  double bubble = 0;                         // (p - 1) / (m + p - 1)
  double dp_bytes = 0, tp_bytes = 0, pp_bytes = 0;  // sent per GPU per step
  bool fits = true;                          // within device_memory (when known)
};

// Checks the input (degrees divide heads and layers, positive sizes) and computes.
absl::StatusOr<Plan> MakePlan(const PlanInput& in);
// Model-state bytes per rank of `params` parameters (already split by tp x pp).
Plan StateBytes(double params, Precision precision, bool fp32_grad_accum, int zero, int dp);

// The input a job spec describes (fp32: Gantry's training path).
PlanInput PlanOfSpec(const JobSpec& spec);

// The GPT-2 presets: gpt2 (124M), gpt2-medium, gpt2-large, gpt2-xl.
absl::StatusOr<model::GPTConfig> ModelPreset(const std::string& name);

// The layout to use on `gpus` devices for a global batch: among those that fit (90% of the
// memory), the one with the least model parallelism, then the lowest ZeRO stage, then the
// least recomputation, the smallest bubble and the largest micro-batch.
absl::StatusOr<PlanInput> Recommend(PlanInput in, int gpus, int global_batch);

// The plan as a table of lines (GB are 1e9 bytes).
std::string RenderPlan(const PlanInput& in, const Plan& p);

}  // namespace gantry::train
