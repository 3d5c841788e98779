// The step cost model: how long one training step of a layout takes on a cluster
// (jobspec/cluster.h), before running it. Pure functions of the plan's input, the device's
// per-op rates and the links.
//
// Per micro-batch and pipeline stage, each op of Gantry's step at its device rate: the GEMMs
// (from the shard's weight shapes: 2 FLOPs a weight a token forward, 4 backward), attention
// (the causal half of 4·T·C a token and layer forward, 2.5 times that backward, at the fused
// kernel's rates; or the unfused path's GEMMs over the whole T x T and the probabilities'
// bytes), the memory-bound ops (norms, residual adds, activations, RoPE, the classifier's
// softmax, the embedding) by their bytes over the memory bandwidth, each op at least the launch
// time; recompute's extra forward (full: the layer; selective: attention). Context
// parallelism (PlanInput::cp): each rank's T/cp rows through every op, the attention's causal
// work over cp, and the ring's exchanges (cost_model.cc's CostOfStage states the rule that
// hides them behind the block attention), or the all-gather that Llama 3's and torchtitan's
// published runs used (PlanInput::cp_exchange), hidden behind the local block only.
//
// Collectives by their algorithm over the link they cross: all-reduce as the faster of a ring
// (2(n-1) latencies + 2(n-1)/n of the bytes over the bandwidth) and a tree (2 log2 n latencies +
// 2 times the bytes); reduce-scatter and all-gather rings ((n-1) latencies + (n-1)/n of the
// bytes); all-to-all likewise; send/recv one latency and the bytes. A group whose ranks
// (jobspec/ranks.h: rank = (stage·dp + replica)·tp + tp_rank) sit on one node uses the
// intra-node link; one that spans nodes the inter-node link, times its ranks on a node (each
// device has its own network port) and at most the intra-node rate.
//
// Overlap as Gantry implements it (worker/train/zero.h): tensor-parallel, expert all-to-all
// and pipeline transfers block the step (exposed); data-parallel reductions run on the
// communication thread during backward (ZeRO 0, 1: once, in the last micro-batch's backward;
// 2, 3: every micro-batch), all but the last bucket hidden while backward lasts; ZeRO 1-2
// gather the updated parameters after the optimizer (exposed); ZeRO 3 gathers each unit
// before its forward and its backward, the next one prefetched during the current one's
// compute. Hidden traffic still costs the profile's comm_compute_cost of its time where the
// collectives share the compute's cores (CPU ranks; measured by calibrate). The pipeline's fill and drain: (p - 1) times the slowest stage's micro-batch (1F1B
// and GPipe alike). The optimizer: AdamW's 28 bytes a parameter of the rank's shard over the
// memory bandwidth, or with offload the host's AdamW pipelined with the copies down and up.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "jobspec/cluster.h"
#include "jobspec/planner.h"

namespace gantry::jobspec {

struct StepCost {
  double step = 0;  // seconds
  // The split: step = compute + exposed_comm + bubble + optimizer.
  double compute = 0;       // the slowest stage's compute over the step's micro-batches
  double exposed_comm = 0;  // collectives the step waits for
  double bubble = 0;        // the pipeline's fill and drain
  double optimizer = 0;     // clipping and AdamW (on the host under offload)
  // Exposed communication by group (seconds per step); the data-parallel part's total time,
  // overlapped or not.
  double tp_comm = 0, pp_comm = 0, ep_comm = 0, dp_comm = 0, dp_comm_total = 0;
  double cp_comm = 0;  // the context-parallel ring's exchanges the step waits for
  double dp_bytes = 0;  // sent per GPU per step over data parallelism
  double tokens = 0;    // per step
  double tokens_per_s = 0, tokens_per_s_per_gpu = 0;
  // FLOP/s per GPU: the hardware's (recomputation counted, attention as 4·T·C a token and
  // layer forward, Megatron's convention: Narayanan et al. 2021) and MFU (the model's, PaLM's
  // 6N + 12·L·T·C a token, over the profile's peak).
  double flops_per_gpu = 0;
  double mfu = 0;
};

// Checks the input as MakePlan does; the model's shape is required.
absl::StatusOr<StepCost> PredictStep(const PlanInput& in, const ClusterSpec& cluster);

// One layout considered for `gpus` devices.
struct RankedLayout {
  PlanInput in;
  Plan plan;
  StepCost cost;
};
// Every layout of `gpus` devices for a global batch (tp dividing the heads and at most a node,
// pp dividing the GPUs over tp, at most one stage a layer: uneven stages split the rest,
// ZeRO 0-3 (2-3 without pp), recompute none/selective/full, sequence parallel with tp,
// micro-batches of powers of two; context parallelism and the interleaved schedule by a bounded
// rule, below), best first by predicted tokens/s, the first `top` that fit
// the device's memory (90%, as MakePlan). The input's own precision, sequence length, schedule
// and offload are kept. `admit`, when given, keeps only the layouts it accepts (the
// constraints of a job spec's `parallel: auto`). NOT_FOUND naming the reason if none fits,
// with the least memory per GPU an admitted layout needs and that layout.
//
// The rule that bounds cp and vp (each multiplies the layouts tried):
//  - cp: powers of two up to 32, where 2·cp divides T and a rank keeps 1,024 rows of each
//    sequence or more (T/cp >= 1024: shorter blocks leave the ring's exchanges less attention to
//    hide behind, and a sequence that short needs no splitting for memory), and only at
//    micro-batch 1: micro-batch 2 at cp 2 holds what micro-batch 1 holds at cp 1 with dp
//    doubled, on as many GPUs, with the same attention work, plus the ring, so it cannot win.
//  - vp: 1, 2 or 4 chunks a stage, with pp > 1, schedule 1f1b, the micro-batches a multiple of
//    pp and a layer at least a chunk: 2 and 4 divide the bubble by as much for as many more
//    pipeline transfers; beyond 4 the bubble left, (p-1)/(v·m+p-1), is at most a quarter of
//    1F1B's while the transfers keep growing, and the chunks' extra activation sets too.
// The sort's ties go to less model parallelism (tp x cp x pp), then fewer chunks, then the
// lower ZeRO stage.
absl::StatusOr<std::vector<RankedLayout>> RankLayouts(PlanInput in, const ClusterSpec& cluster, int gpus,
                                                      int global_batch, int top,
                                                      const std::function<bool(const PlanInput&)>& admit = nullptr);

// Collectives alone (seconds), for tests and the calibration: n ranks over `link`, a buffer of
// `bytes` (all-reduce, reduce-scatter's input, all-gather's output, all-to-all's send buffer).
double AllReduceTime(double bytes, int n, const Link& link);
double ReduceScatterTime(double bytes, int n, const Link& link);  // = AllGatherTime
double AllToAllTime(double bytes, int n, const Link& link);
double SendTime(double bytes, const Link& link);
// The link a group of world ranks crosses on nodes of gpus_per_node: intra if one node holds
// them all; else inter at (ranks per node) x its bandwidth, at most intra's.
Link GroupLink(const std::vector<int>& ranks, const ClusterSpec& cluster);
// The link of point-to-point transfers between these ranks: ClusterSpec::NodeP2P where they
// share a node, GroupLink otherwise.
Link P2PLink(const std::vector<int>& ranks, const ClusterSpec& cluster);

}  // namespace gantry::jobspec
