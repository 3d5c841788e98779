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
#include "jobspec/model_layout.h"
#include "jobspec/job_spec.h"
#include "jobspec/pipeline.h"

namespace gantry::jobspec {

enum class Precision {
  kFp32,   // Gantry's CPU and fp32 GPU paths: params, grads, m, v in fp32 (4 + 4 + 8 bytes)
  kMixed,  // the textbook's (the ZeRO paper's, Megatron's): bf16/fp16 params and grads + fp32
           // master, m, v (2 + 2 + 12 = 16 bytes)
  // Gantry's own train.precision bf16/fp16 (autocast's model): fp32 params (the master), grads,
  // m and v as kFp32, plus the 16-bit working copy of the GEMM tensors (2 bytes each) under
  // ZeRO 0-2 (ZeRO 3 makes a unit's at a time: working bytes); activations by Gantry's layout
  // with 16-bit tensors.
  kAutocast,
};

// PlanInput::cp_exchange.
enum class CpExchange {
  // Gantry's (model/context_parallel.h): a K/V block to the next rank per ring step, each
  // hidden behind the block attention before it.
  kRing,
  // All cp - 1 blocks gathered at once, started with the local block's attention and waited for
  // after it (hidden behind 1/cp of the attention only); backward, gathered again, then the
  // dK/dV (fp32) round a ring as kRing's (torch's _templated_ring_attention_backward).
  kAllGather,
};

struct PlanInput {
  double params = 0;                        // parameters; 0: from the model's shape
  std::optional<jobspec::GPTConfig> model;    // the shape (activations need it)
  int seq_len = 1024;
  Precision precision = Precision::kMixed;
  bool fp32_grad_accum = false;             // mixed: an fp32 gradient accumulation buffer (+4 bytes)
  // train.grad_reduce_dtype bf16: the DP gradient reductions move 2 bytes a gradient (kMixed
  // always does), and ZeRO 3 keeps a bf16 staging buffer of each size of unit (working bytes).
  bool bf16_grad_reduce = false;
  int zero = 0, tp = 1, pp = 1, dp = 1;
  // parallel.virtual_stages: model chunks a stage (the interleaved 1F1B schedule, jobspec/
  // pipeline.h): the bubble divided by vp, vp times the pipeline transfers, and each stage's
  // activations for the micro-batches its warm-up keeps in flight.
  int vp = 1;
  // Context parallelism (model/context_parallel.h; the job spec's parallel.cp once wired): each
  // sequence split over cp ranks that hold the same parameters, rank i the chunks i and
  // 2·cp−1−i of 2·cp (the causal mask's balance). Per rank: the sequence's activations over
  // cp, attention's work over cp, a ring of K/V exchanges per layer (cp−1 blocks forward,
  // 2·cp−1 backward, the key/value heads only), and the two K/V blocks (and backward's dK/dV)
  // the ring holds; gradients reduced and ZeRO sharded over dp x cp. World dp x cp x tp x pp,
  // rank ((stage·dp + replica)·cp + cp_rank)·tp + tp_rank (Megatron-Core's order). seq_len a
  // multiple of 2·cp.
  int cp = 1;
  // How the K/V blocks travel under cp > 1, for the step's cost (PredictStep). Gantry runs the
  // ring; the all-gather is the other published design, described here so that published runs
  // that used it can be checked (docs/perf/planner.md): Llama 3's CP ("The Llama 3 Herd of
  // Models", §3.3.2: K and V all-gathered, the latency exposed) and torch's context_parallel
  // with rotate method "allgather" (torchtitan's default in Dec. 2024). The planner's bytes stay
  // the ring's.
  CpExchange cp_exchange = CpExchange::kRing;
  // The K/V that travel are GQA's repeated ones, a copy for every query head (torchtitan's
  // Llama repeats K and V before scaled_dot_product_attention, where torch's context_parallel
  // takes them): NH heads, not NKV. Gantry's ring sends the key/value heads only.
  bool cp_repeated_kv = false;
  std::vector<int> stage_layers;            // parallel.stage_layers (empty: split by cost, StageBounds; pp x vp entries)
  int micro_batch = 1;
  int microbatches = 1;                     // per step and pipeline (gradient accumulation)
  jobspec::Recompute recompute = jobspec::Recompute::kNone;
  Schedule schedule = Schedule::k1F1B;      // pp > 1: how many micro-batches a stage keeps
  // fp32: attention by the fused kernels of the cuda backends (resources.device cuda or
  // cuda-emulated), which keep each query row's log-sum-exp (B, NH, T) where the cpu keeps
  // the probabilities (B, NH, T, T).
  bool fused_attention = false;
  // 16-bit on the cuda backends: a Llama's grouped key/value heads read as they are by cuDNN's
  // SDPA (kernels::Capability::kGroupedAttention), no repeated copy among the activations.
  bool grouped_attention = false;
  // train.classifier_rows: the last stage's logits one block of rows (jobspec::LayoutOptions).
  int classifier_rows = 0;
  double device_memory = 0;                 // bytes per GPU; 0: unknown
  // optimizer.offload cpu (ZeRO 1-3): the optimizer's share (master, m, v) in host memory,
  // with a host copy of the rank's gradient shard to step it from.
  bool offload_optimizer = false;
  // parallel.offload_params cpu (ZeRO 3, with the optimizer offloaded): the parameter shard
  // is the host's master; the device keeps none of it between units.
  bool offload_params = false;
  // parallel.sequence_parallel (tp > 1): the norms' and the residual stream's activations
  // hold 1/tp of the rows.
  bool sequence_parallel = false;
  // parallel.ep (divides dp; a MoE model): each rank holds num_experts/ep of every MoE layer's
  // experts, whose ZeRO shards are over the dp/ep replicas that hold the same experts.
  int ep = 1;
  // parallel.bucket_mb: the gradient buckets reduced as backward finishes them (the step's
  // cost model: the last one's reduction is not hidden).
  double bucket_mb = 25;
};

struct Plan {
  // Bytes per GPU: with a model shape, those of the rank that holds the most (per rank:
  // PlanRanks); with a parameter count alone, 1/(tp x pp) of the model's.
  double params = 0, grads = 0, optimizer = 0, activations = 0;
  double ring = 0;  // of activations: context parallelism's ring working memory (model::RingAttention::bytes)
  double host = 0;  // host memory per rank (offload: the optimizer's shard and its gradient staging)
  double model_state() const { return params + grads + optimizer; }
  double total() const { return model_state() + activations + working; }
  double bubble = 0;                         // (p - 1) / (v·m + p - 1)
  double dp_bytes = 0, tp_bytes = 0, pp_bytes = 0;  // sent per GPU per step
  double cp_bytes = 0;                              // the ring's K/V (and dK/dV) blocks, per GPU per step
  bool fits = true;                          // within device_memory (when known)
  // Transient bytes beyond params, grads, optimizer and activations, at their largest: ZeRO's
  // collective buffers (stage 3: gathered units and per-micro-batch gradient buckets) and
  // kAutocast's 16-bit copies of a unit's GEMM tensors under ZeRO 3. In total().
  // Not counted anywhere: a device backend's op scratch, grown to the largest op's (the GEMMs'
  // fp32 room before their bias pass, the attention's, the context-parallel ring's 16-bit blocks'
  // packed copies for cuDNN: kernels/cuda/backend.cc), and the libraries' workspaces (cuBLAS,
  // cuDNN), as the tokens and the runtime's own buffers are not.
  double working = 0;
};

// Checks the input (degrees divide heads and layers, positive sizes) and computes.
absl::StatusOr<Plan> MakePlan(const PlanInput& in);

// What each rank of a layout holds, from the model's shape: the shard the trainer builds
// (model::ShardOf: its tensors, the replicated LayerNorms and biases, wte at both ends of a
// pipeline), ZeRO's share of it, and its activations (fp32: Gantry's own buffers, exactly;
// mixed: Megatron's per-layer bytes) for the micro-batches the schedule keeps on its stage.
// Every data-parallel replica of (stage, tp_rank) holds the same: world rank
// (stage x dp + replica) x tp + tp_rank.
struct RankPlan {
  int stage = 0, tp_rank = 0;
  double num_params = 0;  // the shard's parameters
  Plan bytes;             // params, grads, optimizer, activations
};
absl::StatusOr<std::vector<RankPlan>> PlanRanks(const PlanInput& in);  // stage-major
// Model-state bytes per rank of `params` parameters (already split by tp x pp). offload: the
// optimizer's shard in host memory (`host`): fp32 master, m and v, and the gradient shard's
// host copy (4 bytes each per parameter of the shard); nothing of it on the device.
// kAutocast: gemm_params of the params are GEMM operands (model::ParamTensor::gemm; < 0: all).
Plan StateBytes(double params, Precision precision, bool fp32_grad_accum, int zero, int dp, bool offload = false,
                bool offload_params = false, double gemm_params = -1);

// The input a job spec describes (fp32: Gantry's training path).
PlanInput PlanOfSpec(const JobSpec& spec);
// Whether in's attention takes a Llama's grouped key/value heads as they are (its
// grouped_attention): the cuda backends' default for 16-bit attention, cuDNN, where it takes
// the call (head sizes that are multiples of 8 up to 256, two tokens or more:
// kernels/cuda/cudnn_attention.h). in.fused_attention, precision, model and seq_len set.
bool GroupedAttentionOf(const PlanInput& in);

// The GPT-2 presets: gpt2 (124M), gpt2-medium, gpt2-large, gpt2-xl.
absl::StatusOr<jobspec::GPTConfig> ModelPreset(const std::string& name);

// The layout to use on `gpus` devices for a global batch: among those that fit (90% of the
// memory), the one with the least model parallelism, then the lowest ZeRO stage, then the
// least recomputation, the smallest bubble and the largest micro-batch.
absl::StatusOr<PlanInput> Recommend(PlanInput in, int gpus, int global_batch);

// The plan as a table of lines (GB are 1e9 bytes).
std::string RenderPlan(const PlanInput& in, const Plan& p);
// One line per (stage, tp_rank), with the world ranks that hold it, in bytes.
std::string RenderRanks(const PlanInput& in, const std::vector<RankPlan>& ranks);

}  // namespace gantry::jobspec
