// The job spec: the YAML a user writes to describe a training run. Parsing is strict: an
// unknown field, a value of the wrong type, or an incoherent combination is an error that
// names the field (as "train.lr").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "jobspec/model_layout.h"

namespace gantry::jobspec {

struct DataSpec {
  std::string train;  // llm.c .bin token file, or a glob of shards (data/dataset.h)
  std::string val;    // optional; the same
  bool shuffle = false;
  // The tokenizer the data was prepared with (tokenizer.json, vocab.json, or a directory with
  // either); empty: the byte tokenizer. Recorded in checkpoints; export copies it beside the
  // model.
  std::string tokenizer;
  bool operator==(const DataSpec&) const = default;
};

struct TrainSpec {
  int64_t steps = 0;
  int micro_batch = 0;   // sequences per forward/backward
  int global_batch = 0;  // sequences per optimizer step (= micro_batch x grad_accum x dp)
  double lr = 0;
  int64_t warmup = 0;          // linear warmup steps
  double min_lr_ratio = 1.0;   // cosine decay to lr * min_lr_ratio (1 = constant)
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // tensors of 2 or more dimensions only
  double grad_clip = 1.0;      // max global gradient norm; 0 = off
  uint64_t seed = 1337;
  // Activation checkpointing: none, full (recompute each block in backward) or selective
  // (recompute attention's probabilities only). Same losses, bit for bit.
  std::string recompute = "none";
  // Mixed precision: fp32, bf16 or fp16. In bf16 and fp16 the fp32 parameters stay the
  // master copy (with AdamW's state, where ZeRO keeps them); GEMMs read 16-bit weights and
  // activations and accumulate in fp32; LayerNorm, softmax, the loss and the gradient
  // accumulation stay fp32, as under PyTorch autocast (docs/architecture.md, "Mixed precision").
  std::string precision = "fp32";
  // fp16: dynamic loss scaling with PyTorch GradScaler's rules: the loss is multiplied by the
  // scale (initially loss_scale), a step whose gradients hold an inf or NaN is skipped and
  // halves it, and loss_scale_window clean steps in a row double it.
  double loss_scale = 65536;
  int loss_scale_window = 2000;
  // The type the data-parallel gradient reductions move and add in: fp32 or bf16 (as
  // Megatron's accumulate_allreduce_grads_in_fp32 off). Gradients accumulate across
  // micro-batches in fp32 either way; bf16 rounds each bucket to bf16 before its all-reduce or
  // reduce-scatter and widens the reduced result back (docs/architecture.md, "Gradient
  // reduction in bf16"). Halves the bytes the reductions send.
  std::string grad_reduce_dtype = "fp32";
  // On a GPU, attention's backward through cuDNN: its deterministic algorithm (true, the
  // default: two runs on one GPU give the same bits) or its faster non-deterministic one
  // (false: atomics, so the bits may differ run to run, within the same bound). The cpu and
  // the fused kernels are deterministic either way.
  bool deterministic = true;
  // The classifier and its loss this many token rows at a time (the last pipeline stage's
  // forward runs the classifier's backward block by block, so the (B·T, V) logits are never
  // whole: 6.6 GB less for GPT-2 at B 64 in bf16, where a block of 8192 rows holds 0.8 GB); 0,
  // the default, or at least micro_batch x seq_len: all at once. The losses are the same bits;
  // the classifier's weight gradient is summed block by block (model::GPT::set_classifier_rows).
  int classifier_rows = 0;
  bool operator==(const TrainSpec&) const = default;
};

// `parallel: auto` (or `parallel: {auto: true, ...}`): the coordinator chooses the layout when
// it places the job, for the workers it places it on, by the step cost model
// (jobspec/auto_layout.h). The planner chooses dp, tp, pp, zero_stage, sequence_parallel,
// train.micro_batch and train.recompute; each of them stated beside auto is kept as stated
// (as DeepSpeed's autotuner keeps what its config fixes), and max_tp, max_pp bound the
// planner's degrees. dp is never stated: it is the workers over tp x pp.
struct AutoLayout {
  bool enabled = false;
  // Stated beside auto, so kept: the field's value in ParallelSpec / TrainSpec is the user's.
  bool tp = false, pp = false, zero_stage = false, sequence_parallel = false;
  bool micro_batch = false, recompute = false;
  int max_tp = 0, max_pp = 0;  // 0: no bound
  bool operator==(const AutoLayout&) const = default;
};

struct ParallelSpec {
  AutoLayout auto_layout;
  int dp = 1;          // data-parallel ranks
  int tp = 1;          // tensor-parallel ranks per group (heads must divide; one host per group)
  int pp = 1;          // pipeline stages (at most the layers; split by cost: jobspec::BalanceStages)
  // The layers of each stage, first to last (pp entries, each 1 or more, summing to
  // model.n_layer), as Llama 3 405B gave its first and last stages one layer fewer; empty: the
  // split by cost (jobspec::StageBounds).
  std::vector<int> stage_layers;
  int zero_stage = 0;  // 0: all-reduce; 1: optimizer state sharded; 2: and gradients; 3: and parameters
  double bucket_mb = 25;  // gradients reduced in buckets of about this size (stages 0-2)
  double timeout_s = 0;   // a collective not done by then fails the step; 0 = the worker's default
  std::string schedule = "1f1b";  // pipeline schedule (pp > 1): 1f1b or gpipe
  // The interleaved 1F1B schedule (Narayanan et al. 2021): each stage holds this many chunks of
  // layers (stage s the chunks s, s + pp, ... of pp x virtual_stages), which divides the bubble
  // by as much at the cost of as many more transfers. 1: plain 1F1B. Needs schedule 1f1b, pp > 1,
  // the micro-batches a step a multiple of pp, and a layer at least a chunk; stage_layers then
  // gives each chunk's layers (pp x virtual_stages entries).
  int virtual_stages = 1;
  // ZeRO 3 with optimizer.offload cpu: "cpu" keeps the rank's parameter shard in host memory
  // only (it is the offloaded fp32 master); each unit's piece goes to the device to be gathered.
  std::string offload_params = "none";
  // Megatron's sequence parallelism (tp > 1): the LayerNorm and residual regions hold 1/tp of
  // the sequence's rows on each tensor-parallel rank; an all-gather before the column-parallel
  // GEMMs and a reduce-scatter after the row-parallel ones replace the all-reduces.
  bool sequence_parallel = false;
  // Expert parallelism (model.moe): the dp replicas form groups of ep, each rank of a group
  // holding num_experts/ep of every MoE layer's experts; tokens reach their experts by
  // all-to-all. An expert's gradients are reduced over its dp/ep replicas (ZeRO 0 and 1).
  int ep = 1;
  // Context parallelism (model/context_parallel.h): each sequence split over cp ranks that hold
  // the same parameters and read the same sequences, rank i of a group holding chunks i and
  // 2·cp−1−i of 2·cp (the causal mask's load balance); attention by a ring of K/V exchanges.
  // Gradients are averaged and ZeRO shards over the dp x cp ranks. seq_len must be a multiple
  // of 2·cp. Combines with dp, ZeRO 0-3, tp and sequence parallelism (a cp rank's rows split
  // again over tp), pp, recomputation, bf16 and fp16, offload; on cpu, cuda and cuda-emulated
  // (on the cuda kinds heads up to 128 wide). Not yet with MoE, parameter-server mode or
  // parallel: auto: each is refused with the reason.
  int cp = 1;
  bool operator==(const ParallelSpec&) const = default;
};

struct OptimizerSpec {
  // Where AdamW runs: "worker" (each DP rank, ZeRO-sharded) or "shardserver" (parameter-
  // server mode: each shard server steps its range of the parameters).
  std::string placement = "worker";
  int staleness = 0;  // shardserver: how many steps behind the servers a worker's parameters may be
  // ZeRO-Offload: "cpu" keeps a rank's fp32 master shard and AdamW's m and v in host memory
  // and runs AdamW there (ZeRO 1-3, placement worker); "none" keeps them with the model.
  std::string offload = "none";
  bool operator==(const OptimizerSpec&) const = default;
};

// Scheduling and fault tolerance (the coordinator's).
struct SchedulingSpec {
  int priority = 0;      // higher runs first; first come, first served within one
  int max_restarts = 3;  // times the job is placed again after a lost worker or shard server, or a failed rank
  // Whether a job of higher priority may preempt it (checkpoint, release its workers, wait
  // as PREEMPTED). false is admitted only within the team's nominal quota.
  bool preemptible = true;
  // How long a preempted job has to checkpoint before it is stopped (it then resumes from its
  // last committed checkpoint); 0: the coordinator's --preemption_grace_s.
  double preemption_grace_s = 0;
  bool operator==(const SchedulingSpec&) const = default;
};

// Elastic data parallelism: the coordinator places the job at any dp in [min_dp, max_dp]
// that divides the global batch (the largest the idle workers allow), places it again
// smaller after a lost worker when no spare is left, and grows it at its next checkpoint when
// workers come free. 0, 0: not elastic (dp as given).
struct ElasticSpec {
  int min_dp = 0, max_dp = 0;
  bool enabled() const { return max_dp > 0; }
  bool operator==(const ElasticSpec&) const = default;
};

struct ResourcesSpec {
  int workers = 0;  // worker processes the job asks for; 0 = dp (the product of the degrees)
  // The device kind the job runs on: cpu, cuda or cuda-emulated (the CUDA code path run by
  // the CPU emulator). The coordinator places it only on workers that offer that kind.
  std::string device = "cpu";
  bool operator==(const ResourcesSpec&) const = default;
};

struct EvalSpec {
  int64_t every = 0;  // steps between val-loss evaluations; 0 = only at the end
  int batches = 20;   // micro-batches of the val file per evaluation
  bool operator==(const EvalSpec&) const = default;
};

struct CheckpointSpec {
  int64_t every = 0;  // steps between checkpoints; 0 = none
  int keep = 0;       // keep the newest K checkpoints, remove older ones after each; 0 = all
  double host_budget_mb = 2048;  // host memory for checkpoint copies waiting to be written
  // A cluster job id: start from its newest committed checkpoint; JOB@STEP: from its
  // checkpoint of that step.
  std::string resume_from;
  std::string dir;
  bool operator==(const CheckpointSpec&) const = default;
};

struct JobSpec {
  std::string name = "job";
  SchedulingSpec scheduling;
  ElasticSpec elastic;
  jobspec::GPTConfig model;
  int seq_len = 0;  // T: tokens per sequence
  DataSpec data;
  TrainSpec train;
  EvalSpec eval;
  CheckpointSpec checkpoint;
  ParallelSpec parallel;
  OptimizerSpec optimizer;
  ResourcesSpec resources;
  // Ranks: dp x cp x tp x pp. Rank r is (pp stage, dp replica, cp rank, tp rank) with tp
  // fastest, then cp (jobspec/ranks.h): r = ((stage * dp + replica) * cp + cp_rank) * tp +
  // tp_rank, so a tensor-parallel group is consecutive. (parallel: auto before placement: 1,
  // the degrees not chosen yet.)
  int world_size() const { return parallel.dp * parallel.cp * parallel.tp * parallel.pp; }
  bool auto_layout() const { return parallel.auto_layout.enabled; }
  // The dp sizes an elastic job may run at, ascending (just dp when not elastic): those in
  // [min_dp, max_dp] for which micro_batch x dp divides the global batch (and, with
  // parallel.virtual_stages, leaves a multiple of pp micro-batches a step).
  std::vector<int> DpChoices() const;
  jobspec::Recompute recompute() const {
    return train.recompute == "full"        ? jobspec::Recompute::kFull
           : train.recompute == "selective" ? jobspec::Recompute::kSelective
                                            : jobspec::Recompute::kNone;
  }
  // Placement: the workers this job takes when `available` are idle: its world, or for an
  // elastic job the largest of its dp choices that fits (times cp x tp x pp); 0 when none fits.
  // MinWorld: the fewest it can start on. The coordinator's one rule for both. parallel: auto:
  // resources.workers when stated, else any number from 1 (the planner picks among them).
  int WorldFor(int available) const;
  int MinWorld() const;
  // global_batch = micro_batch x grad_accum x dp
  int grad_accum() const {
    return train.micro_batch > 0 && parallel.dp > 0 ? train.global_batch / (train.micro_batch * parallel.dp) : 0;
  }
  bool operator==(const JobSpec&) const = default;
};

absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text);
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path);
// A job that starts from a model (gantry-train --init-from DIR: its config.json): the spec's
// model is from_model, so its model keys other than seq_len need not be stated, and each one
// that is stated must agree with from_model, else an error naming the field and from_name
// (as "DIR/config.json"). max_seq_len defaults to from_model's (its n_positions) rather than
// to seq_len. from_model null: as above.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& yaml_text, const jobspec::GPTConfig* from_model,
                                     const std::string& from_name);
absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path, const jobspec::GPTConfig* from_model,
                                    const std::string& from_name);
// A placement's layout: what the coordinator decides when it places a job (an elastic job's dp,
// a parallel: auto job's whole layout; any other job's is its spec's own), carried to the ranks
// by the Assignment's typed fields (proto v1::Layout). Once a job is placed it is the one owner
// of these fields: the ranks read the spec as its user submitted it and apply this to it
// (ApplyLayout), and nothing rewrites the spec's text.
struct PlacedLayout {
  int dp = 1, tp = 1, pp = 1, cp = 1;
  int virtual_stages = 1;  // the interleaved schedule's chunks a stage (1: plain 1F1B)
  int zero_stage = 0;
  bool sequence_parallel = false;
  int micro_batch = 1;
  std::string recompute = "none";  // none, full or selective (TrainSpec::recompute)
  bool operator==(const PlacedLayout&) const = default;
};
// A spec's layout: a placed spec's, or a fixed spec's own.
PlacedLayout LayoutOf(const JobSpec& spec);
// `spec` (parsed, as its user submitted it) placed with `layout`: the spec the ranks run, with
// parallel: auto resolved (auto off, every degree the layout's). INVALID_ARGUMENT naming the
// field when the spec does not admit the layout: a field it fixes that the layout changes (every
// one but an elastic job's dp, which must be one of DpChoices; under parallel: auto, those stated
// beside auto, and tp, pp within max_tp, max_pp), or a layout the spec's validation refuses (the
// checks of ParseJobSpec, on the placed spec). The one place a layout is applied: the worker's,
// and the planner's before it offers a layout (ChooseLayouts), so the two cannot disagree.
absl::StatusOr<JobSpec> ApplyLayout(JobSpec spec, const PlacedLayout& layout);

// The spec as YAML with every field stated (defaults included, doubles exact): its normal
// form, which ParseJobSpec reads back to an equal JobSpec.
std::string ToYaml(const JobSpec& spec);

// A model as the job spec's model keys: "n_layer 2, n_head 2, n_embd 16, vocab_size 256,
// max_seq_len 16", and for Llama also arch, n_kv_head, ffn_hidden, rope_theta and norm_eps
// (defaults resolved).
std::string DescribeModel(const jobspec::GPTConfig& c);
// The model keys on which a and b differ as models (GPTConfig's ==, defaults resolved), each
// as "n_embd (A_NAME 16, B_NAME 32)", joined by ", "; empty when a == b.
std::string ModelDifferences(const jobspec::GPTConfig& a, const std::string& a_name, const jobspec::GPTConfig& b,
                             const std::string& b_name);

// The learning rate at 0-based step `step`: linear warmup over `warmup` steps, then cosine
// decay from lr to lr * min_lr_ratio at the last step.
double LearningRate(const TrainSpec& t, int64_t step);

}  // namespace gantry::jobspec
