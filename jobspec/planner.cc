#include "jobspec/planner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"
#include "jobspec/ranks.h"

namespace gantry::jobspec {

namespace {
const char* RecomputeName(jobspec::Recompute r) {
  return r == jobspec::Recompute::kFull ? "full" : r == jobspec::Recompute::kSelective ? "selective" : "none";
}
}  // namespace

Plan StateBytes(double params, Precision precision, bool fp32_grad_accum, int zero, int dp, bool offload,
                bool offload_params, double gemm_params) {
  // Bytes per parameter: fp32 4 / 4 / 8 (m, v); mixed 2 / 2 (+4 accumulation) / 12 (master, m, v);
  // autocast fp32's, and 2 a GEMM parameter for the working copy (ZeRO 0-2).
  const bool mixed = precision == Precision::kMixed;
  const double pb = mixed ? 2 : 4, gb = mixed ? (fp32_grad_accum ? 6 : 2) : 4, ob = mixed ? 12 : 8;
  const double d = std::max(1, dp);
  Plan p;
  p.optimizer = params * ob / (zero >= 1 ? d : 1);
  p.grads = params * gb / (zero >= 2 ? d : 1);
  p.params = params * pb / (zero >= 3 ? d : 1);
  if (offload && zero >= 1) {
    p.host = params * 16 / d;  // master, m, v and the gradients' staging, fp32
    p.optimizer = 0;
    if (offload_params && zero >= 3) p.params = 0;  // the master is the shard
  }
  if (precision == Precision::kAutocast && zero <= 2) p.params += 2 * (gemm_params < 0 ? params : gemm_params);
  return p;
}

namespace {
absl::Status CheckInput(const PlanInput& in) {
  if (in.tp < 1 || in.pp < 1 || in.dp < 1 || in.cp < 1) {
    return absl::InvalidArgumentError("tp, pp, dp and cp must be >= 1");
  }
  if (in.cp > 1 && in.seq_len % (2 * in.cp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cp ", in.cp, ": the sequence length ", in.seq_len,
                                                   " is not a multiple of 2 x cp = ", 2 * in.cp,
                                                   " (each rank holds two chunks of 2 x cp)"));
  }
  if (in.zero < 0 || in.zero > 3) return absl::InvalidArgumentError("zero must be 0 to 3");
  if (in.ep < 1 || in.dp % in.ep != 0) {
    return absl::InvalidArgumentError(absl::StrCat("ep ", in.ep, " does not divide dp ", in.dp));
  }
  if (in.ep > 1 && (!in.model || in.model->moe.num_experts % in.ep != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("ep ", in.ep, " needs a mixture-of-experts model whose experts it divides"));
  }
  if (in.micro_batch < 1 || in.microbatches < 1) return absl::InvalidArgumentError("micro-batch sizes must be >= 1");
  if (auto s = CheckInterleaved(in.schedule, in.pp, in.microbatches, in.vp); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("vp ", s.message()));
  }
  if (in.model) {
    const auto& c = *in.model;
    if (c.n_head % in.tp != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tp ", in.tp, " does not divide the ", c.n_head, " heads"));
    }
    if (c.kv_heads() % in.tp != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tp ", in.tp, " does not divide the ", c.kv_heads(), " key/value heads"));
    }
    if (c.ffn() % in.tp != 0) {
      return absl::InvalidArgumentError(absl::StrCat("tp ", in.tp, " does not divide the MLP's width ", c.ffn()));
    }
    if (in.pp > c.n_layer) {  // stages may be uneven (BalanceStages), never empty
      return absl::InvalidArgumentError(
          absl::StrCat("pp ", in.pp, " stages for ", c.n_layer, " layers (each stage takes one layer at least)"));
    }
    if (in.vp > 1 && in.pp * in.vp > c.n_layer) {
      return absl::InvalidArgumentError(absl::StrCat("pp ", in.pp, " x vp ", in.vp, " chunks for ", c.n_layer,
                                                     " layers (each chunk takes one layer at least)"));
    }
    if (!in.stage_layers.empty()) {
      if (auto s = CheckStageLayers(in.stage_layers, in.pp * std::max(1, in.vp), c.n_layer); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("stage_layers ", s.message()));
      }
    }
  } else if (in.params <= 0) {
    return absl::InvalidArgumentError("no model: give a parameter count or a shape");
  }
  return absl::OkStatus();
}

// The context-parallel ring's working memory on one rank (model::RingAttention::bytes, host
// buffers kept between calls): the K/V block it computes with and the one arriving (fp32; in
// bf16 or fp16 the two as they travel, 16-bit, and the one computed with, fp32: the same
// bytes), backward's dK/dV (this step's two and the one arriving, fp32) and D = rowsum(dO·O):
// 5 fp32 blocks of its rows' key/value heads, B·rows·2·NKV·hd floats each (NKV/tp under tp),
// and one (B, NH, rows). kAutocast (the ring's block ops compute in fp32 on every backend,
// the cuda kinds' too) adds the fp32 copies of the ring's 16-bit operands and results
// (model::RunContext::RingScratch, the backend's memory): q|k|v and dq|dk|dv, out and dout,
// two of (B, rows, (NH + 2·NKV)·hd) and two of (B, rows, NH·hd). 0 without cp.
double RingCpBytes(const PlanInput& in) {
  if (in.cp <= 1 || !in.model) return 0;
  const auto& c = *in.model;
  const double rows = static_cast<double>(in.micro_batch) * in.seq_len / in.cp, t = in.tp;
  const double kv = c.kv_heads() / t, nh = c.n_head / t, hd = c.head_dim();
  const double widened =
      in.precision == Precision::kAutocast ? 2 * rows * (nh + 2 * kv) * hd + 2 * rows * nh * hd : 0;
  return 4 * (5 * rows * 2 * kv * hd + rows * nh + widened);
}

// Transient bytes of one rank (Plan::working). ZeRO 3 (worker/train/zero.h): the buffers of
// its collectives, which a pool keeps once made, one for each concurrent use of a size: of a
// layer's unit, the one in use and the one prefetched, and two gradient buckets (the one
// backward fills and the one reducing: a third waits); of the first stage's embedding unit,
// which also serves the tied classifier, the gathered one (held from the classifier's forward
// through its backward) and its gradient bucket (from the classifier's backward to the
// encoder's). Each is its unit padded to dp equal pieces. kAutocast adds the 16-bit copies of
// one layer's GEMM tensors and of the classifier's wte, each tensor 64-byte aligned; a bf16
// gradient reduction its staging buffers.
double WorkingBytes(const PlanInput& in, const jobspec::ModelShard& shard, const std::vector<jobspec::ParamTensor>& tensors) {
  if (in.zero < 3) return 0;
  const double d = static_cast<double>(in.dp) * in.cp;  // ZeRO shards over dp x cp
  auto padded = [&](double n) { return std::ceil(n / d) * d; };
  double layer = 0, layer_gemm = 0, wte = 0, embedding = 0, head = 0;
  // The embedding's tensors (first stage), each layer's, then the head's; the largest layer
  // stands for every layer (a MoE layer, if any: ZeRO 3 holds one or two units at a time).
  const std::string classifier = jobspec::ClassifierTensor(*in.model);
  size_t i = shard.first() ? static_cast<size_t>(jobspec::EmbeddingTensors(*in.model)) : 0;
  for (size_t j = 0; j < i; ++j) embedding += static_cast<double>(tensors[j].numel);
  for (int l = shard.layer_begin; l < shard.layer_end; ++l) {
    double n = 0, gemm = 0;
    for (const size_t end = i + static_cast<size_t>(jobspec::TensorsOfLayer(*in.model, l, shard)); i < end; ++i) {
      n += static_cast<double>(tensors[i].numel);
      if (tensors[i].gemm) gemm += static_cast<double>(tensors[i].working_room());
    }
    layer = std::max(layer, n);
    layer_gemm = std::max(layer_gemm, gemm);
  }
  for (; i < tensors.size(); ++i) head += static_cast<double>(tensors[i].numel);
  for (const auto& t : tensors) {
    if (t.name == classifier) wte = static_cast<double>(t.working_room());
  }
  const double floats = 4 * padded(layer) + (shard.first() ? 2 * padded(embedding) : 0) + 2 * padded(head);
  double bytes = 4 * floats;
  if (in.precision == Precision::kAutocast) bytes += 2 * (layer_gemm + (shard.last() ? wte : 0));
  // bf16 gradient reduction: each unit's bucket rounded into a bf16 staging buffer on the
  // communication thread (one reduction at a time: one buffer of each unit size).
  if (in.bf16_grad_reduce) bytes += 2 * (padded(layer) + (shard.first() ? padded(embedding) : 0) + padded(head));
  return bytes;
}

// Activation bytes of one stage's shard for the micro-batches it keeps.
double ActivationBytes(const PlanInput& in, const jobspec::ModelShard& shard) {
  const auto& c = *in.model;
  const int slots = in.pp > 1 ? PipelineSlots(in.schedule, in.pp, shard.stage, in.microbatches, in.vp) : 1;
  // Context parallelism: every buffer of the sequence holds this rank's T/cp rows, and the
  // ring's attention keeps each row's log-sum-exp (as the fused kernels do), never the
  // probabilities, and reads grouped key/value heads as they are; the ring's own working
  // memory (RingCpBytes) once a stage.
  const bool ring = in.cp > 1;
  const int rows = in.seq_len / in.cp;
  if (in.precision != Precision::kMixed) {
    // Gantry's own model: its activation buffer, exactly: the stage's scratch once, and what a
    // micro-batch's backward reads for each micro-batch in flight (interleaved: of any chunk,
    // with its mailbox).
    jobspec::LayoutOptions lo;
    lo.recompute = in.recompute;
    lo.fused_attention = in.fused_attention || ring;
    lo.half = in.precision == Precision::kAutocast;
    lo.grouped_attention = in.grouped_attention || ring;
    lo.classifier_rows = in.classifier_rows;
    return static_cast<double>(jobspec::LayoutChunks(c, shard, in.micro_batch, rows, lo).floats(slots)) *
               4 +
           RingCpBytes(in);
  }
  // Megatron's per-layer bytes (16-bit): sbh(10 + 24/t + 5as/(ht)), and with sequence
  // parallelism sbh(34/t + 5as/(ht)) (Korthikanti et al., 2022, table 2); selective drops the
  // attention term; full keeps the layer input, 2sbh (2sbh/t sharded). The last stage adds
  // fp32 logits.
  // Context parallelism: s is this rank's rows, and the ring's attention keeps no scores.
  const double s = rows, b = in.micro_batch, h = c.n_embd, a = c.n_head, t = in.tp;
  const double replicated = in.sequence_parallel ? 10 / t : 10;
  double per_layer = s * b * h * (replicated + 24 / t + (ring ? 0 : 5 * a * s / (h * t)));
  if (in.recompute == jobspec::Recompute::kSelective) per_layer = s * b * h * (replicated + 24 / t);
  if (in.recompute == jobspec::Recompute::kFull) per_layer = 2 * s * b * h / (in.sequence_parallel ? t : 1);
  // A slot holds one chunk's micro-batch (the largest chunk's layers; interleaved, and its
  // mailbox: the residual stream's rows in 16 bits).
  double layers = 0;
  for (int k = 0; k < shard.num_chunks(); ++k) {
    const jobspec::ModelShard one = jobspec::ChunkShard(c, shard, k);
    layers = std::max<double>(layers, one.layer_end - one.layer_begin);
  }
  const double mailbox = shard.num_chunks() > 1 ? 2 * s * b * h / (in.sequence_parallel ? t : 1) : 0;
  return (per_layer * layers + mailbox) * slots + (shard.last() ? s * b * c.vocab_size * 4 / t : 0) + RingCpBytes(in);
}
}  // namespace

absl::StatusOr<std::vector<RankPlan>> PlanRanks(const PlanInput& in) {
  RETURN_IF_ERROR(CheckInput(in));
  if (!in.model) return absl::InvalidArgumentError("per-rank bytes need the model's shape");
  std::vector<RankPlan> ranks;
  for (int stage = 0; stage < in.pp; ++stage) {
    for (int tp_rank = 0; tp_rank < in.tp; ++tp_rank) {
      jobspec::ModelShard shard = jobspec::ShardOf(*in.model, in.tp, tp_rank, in.pp, stage, in.stage_layers, in.vp);
      shard.sequence_parallel = in.sequence_parallel && in.tp > 1;
      shard.ep = in.ep;  // every ep rank holds as many experts: rank 0's stand for all
      RankPlan r{stage, tp_rank, 0, {}};
      const std::vector<jobspec::ParamTensor> tensors = jobspec::ParameterLayout(*in.model, shard);
      // Under expert parallelism the experts' state is sharded over their dp/ep replicas.
      double gemm[2] = {0, 0}, params[2] = {0, 0};
      for (const auto& t : tensors) {
        const int expert = in.ep > 1 && t.name.find(".mlp.experts.") != std::string::npos ? 1 : 0;
        params[expert] += static_cast<double>(t.numel);
        if (t.gemm) gemm[expert] += static_cast<double>(t.working_room());
      }
      r.num_params = params[0] + params[1];
      // ZeRO shards over the dp x cp ranks that hold the same parameters.
      r.bytes = StateBytes(params[0], in.precision, in.fp32_grad_accum, in.zero, in.dp * in.cp, in.offload_optimizer,
                           in.offload_params, gemm[0]);
      if (params[1] > 0) {
        const Plan x = StateBytes(params[1], in.precision, in.fp32_grad_accum, in.zero, in.dp / in.ep * in.cp,
                                  in.offload_optimizer, in.offload_params, gemm[1]);
        r.bytes.params += x.params;
        r.bytes.grads += x.grads;
        r.bytes.optimizer += x.optimizer;
        r.bytes.host += x.host;
      }
      r.bytes.activations = ActivationBytes(in, shard);
      r.bytes.ring = RingCpBytes(in);
      r.bytes.working = WorkingBytes(in, shard, tensors);
      ranks.push_back(r);
    }
  }
  return ranks;
}

absl::StatusOr<Plan> MakePlan(const PlanInput& in) {
  RETURN_IF_ERROR(CheckInput(in));
  Plan p;
  // Model parallelism splits the parameters; ZeRO shards each split over dp.
  double split = in.params / (in.tp * in.pp);
  const double D = static_cast<double>(in.dp) * in.cp;  // the ranks that hold the same parameters
  if (in.model) {  // the rank that holds the most
    ASSIGN_OR_RETURN(std::vector<RankPlan> ranks, PlanRanks(in));
    const RankPlan* top = &ranks[0];
    for (const auto& r : ranks) {
      if (r.bytes.total() > top->bytes.total()) top = &r;
    }
    p = top->bytes;
    split = top->num_params;
    const auto& c = *in.model;
    // (s: this rank's rows of a sequence, T/cp.)
    const double s = static_cast<double>(in.seq_len) / in.cp, b = in.micro_batch, h = c.n_embd, t = in.tp,
                 L = c.n_layer;
    const double act_bytes = in.precision == Precision::kFp32 ? 4 : 2;
    // Tensor parallelism: 2 all-reduces forward and 2 backward of (s, b, h) per layer and
    // micro-batch, each moving 2(t-1)/t of it.
    p.tp_bytes = in.tp > 1 ? 4 * (L / in.pp) * in.microbatches * s * b * h * act_bytes * 2 * (t - 1) / t : 0;
    // Pipeline: each micro-batch's activation forward and its gradient back, per boundary
    // (interleaved: each of a stage's vp chunks sends its own).
    // (each rank's rows of the residual stream: 1/tp of them under sequence parallelism)
    const double sp = in.sequence_parallel && in.tp > 1 ? t : 1;
    p.pp_bytes = in.pp > 1 ? 2 * in.vp * in.microbatches * s * b * h * act_bytes / sp : 0;
    // Context parallelism's ring, per layer and micro-batch: cp - 1 K/V blocks forward (and
    // again in a recomputed forward), backward cp - 1 K/V blocks and cp dK/dV blocks (fp32),
    // a block being the rank's rows of the key/value heads (1/tp of them); K/V in the
    // activations' type (model::RingAttention sends bf16/fp16 blocks as they are, 2 bytes).
    if (in.cp > 1) {
      const double block = s * b * 2 * c.kv_heads() / t * c.head_dim();
      const double fwd = (in.cp - 1) * block * act_bytes;
      const double again = in.recompute == jobspec::Recompute::kNone ? 0 : fwd;
      const double bwd = fwd + in.cp * block * 4;
      p.cp_bytes = (L / in.pp) * in.microbatches * (fwd + again + bwd);
    }
  } else {
    p = StateBytes(split, in.precision, in.fp32_grad_accum, in.zero, in.dp * in.cp, in.offload_optimizer,
                   in.offload_params);
  }
  // Data parallelism, in ring collectives that each move (d-1)/d of their buffer: the
  // gradients all-reduced (ZeRO 0: twice that) or reduce-scattered (ZeRO 1-3), and the
  // parameters all-gathered after the update (ZeRO 1, 2) or in forward and in backward (ZeRO
  // 3). Gantry's parameters are fp32 on the wire; its gradients are too unless
  // train.grad_reduce_dtype is bf16. Stages 0 and 1 reduce once per step; 2 and 3 keep no
  // whole gradient, so they reduce every micro-batch, and 3 gathers every micro-batch's units.
  const double d = D, param_wire = in.precision == Precision::kMixed ? 2 : 4;
  const double grad_wire = in.precision == Precision::kMixed || in.bf16_grad_reduce ? 2 : 4;
  const double m = in.microbatches;
  const double moved = in.zero == 0   ? 2 * grad_wire
                       : in.zero == 1 ? grad_wire + param_wire
                       : in.zero == 2 ? m * grad_wire + param_wire
                                      : m * (grad_wire + 2 * param_wire);
  p.dp_bytes = D > 1 ? split * moved * (d - 1) / d : 0;
  p.bubble = IdealBubble(in.pp, in.microbatches, in.vp);
  p.fits = in.device_memory <= 0 || p.total() <= 0.9 * in.device_memory;
  return p;
}

bool GroupedAttentionOf(const PlanInput& in) {
  if (!in.model || !in.fused_attention || in.precision != Precision::kAutocast) return false;
  const int hd = in.model->head_dim();
  return hd % 8 == 0 && hd <= 256 && in.seq_len >= 2;
}

PlanInput PlanOfSpec(const JobSpec& spec) {
  PlanInput in;
  in.model = spec.model;
  in.seq_len = spec.seq_len;
  in.precision = spec.train.precision == "fp32" ? Precision::kFp32 : Precision::kAutocast;
  in.zero = spec.parallel.zero_stage;
  in.dp = spec.parallel.dp;
  in.tp = spec.parallel.tp;
  in.pp = spec.parallel.pp;
  in.stage_layers = spec.parallel.stage_layers;
  in.vp = spec.parallel.virtual_stages;
  in.cp = spec.parallel.cp;
  in.micro_batch = spec.train.micro_batch;
  in.microbatches = spec.grad_accum();
  in.recompute = spec.recompute();
  if (auto sched = ParseSchedule(spec.parallel.schedule); sched.ok()) in.schedule = *sched;
  in.fused_attention = spec.resources.device != "cpu";  // the cuda backends' default
  in.offload_optimizer = spec.optimizer.offload == "cpu";
  in.offload_params = spec.parallel.offload_params == "cpu";
  in.sequence_parallel = spec.parallel.sequence_parallel;
  in.ep = spec.parallel.ep;
  in.bf16_grad_reduce = spec.train.grad_reduce_dtype == "bf16";
  in.bucket_mb = spec.parallel.bucket_mb;
  in.grouped_attention = GroupedAttentionOf(in);
  in.classifier_rows = spec.train.classifier_rows;
  return in;
}

absl::StatusOr<jobspec::GPTConfig> ModelPreset(const std::string& name) {
  jobspec::GPTConfig c;
  c.vocab_size = 50257;
  c.max_seq_len = 1024;
  if (name == "gpt2") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
  } else if (name == "gpt2-medium") {
    c.n_layer = 24, c.n_head = 16, c.n_embd = 1024;
  } else if (name == "gpt2-large") {
    c.n_layer = 36, c.n_head = 20, c.n_embd = 1280;
  } else if (name == "gpt2-xl") {
    c.n_layer = 48, c.n_head = 25, c.n_embd = 1600;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("model preset '", name, "': expected gpt2, gpt2-medium, gpt2-large or gpt2-xl"));
  }
  return c;
}

absl::StatusOr<PlanInput> Recommend(PlanInput in, int gpus, int global_batch) {
  if (gpus < 1 || global_batch < 1) return absl::InvalidArgumentError("recommend needs gpus and a global batch >= 1");
  std::optional<std::pair<std::vector<double>, PlanInput>> best;
  for (int tp : {1, 2, 4, 8}) {
    for (int pp = 1; pp <= gpus; ++pp) {
      if (gpus % (tp * pp * in.cp) != 0) continue;  // (the input's cp is kept)
      // (pp need not divide the layers: uneven stages, BalanceStages; at most one stage a layer)
      if (in.model && (in.model->n_head % tp != 0 || in.model->kv_heads() % tp != 0 || in.model->ffn() % tp != 0 ||
                       pp > in.model->n_layer)) {
        continue;
      }
      const int dp = gpus / (tp * pp * in.cp);
      for (int zero = 0; zero <= 3; ++zero) {
        for (auto rc : {jobspec::Recompute::kNone, jobspec::Recompute::kSelective, jobspec::Recompute::kFull}) {
          for (int mb : {64, 32, 16, 8, 4, 2, 1}) {
            if (global_batch % (mb * dp) != 0) continue;
            PlanInput c = in;
            c.tp = tp, c.pp = pp, c.dp = dp, c.zero = zero, c.recompute = rc, c.micro_batch = mb;
            c.microbatches = global_batch / (mb * dp);
            auto p = MakePlan(c);
            if (!p.ok() || !p->fits) continue;
            const std::vector<double> key = {static_cast<double>(tp * pp), static_cast<double>(zero),
                                             static_cast<double>(rc), p->bubble, -static_cast<double>(mb)};
            if (!best || key < best->first) best = {key, c};
          }
        }
      }
    }
  }
  if (!best) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "no layout of %d GPUs fits %.1f GB each at global batch %d, even with ZeRO 3, full recompute and "
        "micro-batch 1",
        gpus, in.device_memory / 1e9, global_batch));
  }
  return best->second;
}

std::string RenderPlan(const PlanInput& in, const Plan& p) {
  auto gb = [](double b) {  // GB, MB or kB (1e9, 1e6, 1e3 bytes), whichever reads best
    return b >= 1e9 || b == 0 ? absl::StrFormat("%8.2f GB", b / 1e9)
                              : b >= 1e6 ? absl::StrFormat("%8.2f MB", b / 1e6) : absl::StrFormat("%8.2f kB", b / 1e3);
  };
  std::string s = absl::StrFormat(
      "layout: tp %d x %spp %d x dp %d, ZeRO %d, %s%s, micro-batch %d x %d per step, recompute %s\n", in.tp,
      in.cp > 1 ? absl::StrFormat("cp %d x ", in.cp) : "", in.pp, in.dp, in.zero,
      in.precision == Precision::kMixed ? "mixed precision" : in.precision == Precision::kAutocast ? "bf16/fp16" : "fp32",
      in.fp32_grad_accum ? " (+fp32 grad accumulation)" : "", in.micro_batch, in.microbatches,
      RecomputeName(in.recompute));
  absl::StrAppend(&s, in.model && in.tp * in.pp > 1 ? "per GPU (the rank that holds the most; gantry plan --ranks: each):\n"
                                                    : "per GPU:\n");
  absl::StrAppend(&s, "  parameters    ", gb(p.params), "\n");
  absl::StrAppend(&s, "  gradients     ", gb(p.grads), "\n");
  absl::StrAppend(&s, "  optimizer     ", gb(p.optimizer), "\n");
  absl::StrAppend(&s, "  model states  ", gb(p.model_state()), "\n");
  if (in.model) {
    absl::StrAppend(&s, "  activations   ", gb(p.activations),
                    in.fused_attention ? " (fused attention, as on cuda)" : " (unfused attention, as on the cpu)",
                    "\n");
  }
  if (p.working > 0) absl::StrAppend(&s, "  working       ", gb(p.working), "\n");
  absl::StrAppend(&s, "  total         ", gb(p.total()));
  if (in.device_memory > 0) {
    absl::StrAppend(&s, absl::StrFormat(" of %.1f GB: %s", in.device_memory / 1e9, p.fits ? "fits" : "DOES NOT FIT"));
  }
  absl::StrAppend(&s, "\n");
  if (p.host > 0) absl::StrAppend(&s, "host memory (optimizer offload): ", gb(p.host), " per rank\n");
  if (in.vp > 1) {
    absl::StrAppend(&s, absl::StrFormat("pipeline bubble: %.1f%% (interleaved, %d chunks a stage: (p-1)/(v·m+p-1) = %d/%d)\n",
                                        100 * p.bubble, in.vp, in.pp - 1, in.vp * in.microbatches + in.pp - 1));
  } else {
    absl::StrAppend(&s, absl::StrFormat("pipeline bubble: %.1f%% ((p-1)/(m+p-1) = %d/%d)\n", 100 * p.bubble, in.pp - 1,
                                        in.microbatches + in.pp - 1));
  }
  absl::StrAppend(&s, "sent per GPU per step: data-parallel ", gb(p.dp_bytes),
                  in.bf16_grad_reduce && in.precision != Precision::kMixed ? " (gradients in bf16)" : "",
                  ", tensor-parallel ", gb(p.tp_bytes),
                  ", pipeline ", gb(p.pp_bytes),
                  in.cp > 1 ? absl::StrCat(", context-parallel ring ", gb(p.cp_bytes)) : "", "\n");
  return s;
}

std::string RenderRanks(const PlanInput& in, const std::vector<RankPlan>& ranks) {
  std::string s = absl::StrFormat("%-6s %-8s %-16s %14s %14s %14s %14s %14s\n", "stage", "tp_rank", "ranks", "params_B",
                                  "grads_B", "optimizer_B", "activations_B", "total_B");
  for (const RankPlan& r : ranks) {
    // (With cp, the cp ranks of a replica lie between it and the next: cp_rank 0's shown.)
    auto world = [&](int replica) {
      return jobspec::RankOf({replica * in.cp, r.tp_rank, r.stage}, {in.dp * in.cp, in.tp, in.pp});
    };
    std::string who = absl::StrCat(world(0));
    if (in.dp > 1) absl::StrAppend(&who, in.dp > 2 ? ",..," : ",", world(in.dp - 1));
    absl::StrAppend(&s, absl::StrFormat("%-6d %-8d %-16s %14.0f %14.0f %14.0f %14.0f %14.0f\n", r.stage, r.tp_rank, who,
                                        r.bytes.params, r.bytes.grads, r.bytes.optimizer, r.bytes.activations,
                                        r.bytes.total()));
  }
  return s;
}

}  // namespace gantry::jobspec
