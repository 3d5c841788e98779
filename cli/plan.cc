// gantry plan: memory per GPU, the pipeline bubble and bytes sent for a layout, and a
// recommended layout, computed here (no coordinator). With --cluster, the speed too: every
// layout of --gpus devices that fits, ranked by predicted tokens/s (jobspec/cost_model.h), or
// the one --layout names.
#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "jobspec/cluster.h"
#include "jobspec/cost_model.h"
#include "jobspec/job_spec.h"
#include "jobspec/planner.h"

namespace gantry::cli {

namespace {

const char* RecomputeWord(jobspec::Recompute r) {
  return r == jobspec::Recompute::kFull ? "full" : r == jobspec::Recompute::kSelective ? "selective" : "none";
}

// --layout tp=8,pp=16,dp=64[,cp=2][,vp=2][,zero=1][,mb=2][,recompute=full][,sp=1][,ep=2] onto in; dp
// defaults to what the GPUs leave (over tp x cp x pp).
absl::Status ParseLayout(const std::string& text, int gpus, jobspec::PlanInput* in) {
  bool dp_given = false;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    int v = 0;
    if (kv.first == "recompute") {
      if (kv.second != "none" && kv.second != "selective" && kv.second != "full") {
        return absl::InvalidArgumentError("--layout: recompute is none, selective or full");
      }
      in->recompute = kv.second == "full" ? jobspec::Recompute::kFull
                      : kv.second == "selective" ? jobspec::Recompute::kSelective
                                                 : jobspec::Recompute::kNone;
      continue;
    }
    if (!absl::SimpleAtoi(kv.second, &v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--layout: '", part, "' is not KEY=NUMBER"));
    }
    if (kv.first == "tp") in->tp = v;
    else if (kv.first == "pp") in->pp = v;
    else if (kv.first == "vp") in->vp = v;
    else if (kv.first == "cp") in->cp = v;
    else if (kv.first == "dp") in->dp = v, dp_given = true;
    else if (kv.first == "zero") in->zero = v;
    else if (kv.first == "mb") in->micro_batch = v;
    else if (kv.first == "ep") in->ep = v;
    else if (kv.first == "sp") in->sequence_parallel = v != 0;
    else return absl::InvalidArgumentError(absl::StrCat("--layout: unknown key '", kv.first,
                                                        "' (tp, pp, vp, cp, dp, zero, mb, recompute, sp, ep)"));
  }
  if (in->tp < 1 || in->pp < 1 || in->vp < 1 || in->cp < 1) {
    return absl::InvalidArgumentError("--layout: tp, pp, vp and cp must be >= 1");
  }
  const int model_ranks = in->tp * in->pp * in->cp;
  if (!dp_given && gpus > 0) in->dp = std::max(1, gpus / model_ranks);
  if (gpus > 0 && in->dp * model_ranks != gpus) {
    return absl::InvalidArgumentError(absl::StrFormat("--layout: tp %d x cp %d x pp %d x dp %d is not --gpus %d",
                                                      in->tp, in->cp, in->pp, in->dp, gpus));
  }
  return absl::OkStatus();
}

std::string LayoutName(const jobspec::PlanInput& in) {
  std::string s = absl::StrFormat("tp %d %spp %d dp %d, ZeRO %d, mb %d x %d, recompute %s", in.tp,
                                  in.cp > 1 ? absl::StrFormat("cp %d ", in.cp) : "", in.pp, in.dp, in.zero,
                                  in.micro_batch, in.microbatches, RecomputeWord(in.recompute));
  if (in.sequence_parallel) absl::StrAppend(&s, ", sp");
  if (in.ep > 1) absl::StrAppend(&s, ", ep ", in.ep);
  if (in.vp > 1) absl::StrAppend(&s, ", vp ", in.vp);
  return s;
}

std::string JsonOf(const jobspec::RankedLayout& r) {
  const auto& in = r.in;
  const auto& c = r.cost;
  return absl::StrFormat(
      "{\"tp\": %d, \"pp\": %d, \"vp\": %d, \"cp\": %d, \"dp\": %d, \"ep\": %d, \"zero\": %d, \"micro_batch\": %d, \"microbatches\": %d, "
      "\"recompute\": \"%s\", \"sequence_parallel\": %s, \"step_s\": %.6g, \"compute_s\": %.6g, "
      "\"exposed_comm_s\": %.6g, \"bubble_s\": %.6g, \"optimizer_s\": %.6g, \"tp_comm_s\": %.6g, "
      "\"pp_comm_s\": %.6g, \"cp_comm_s\": %.6g, \"ep_comm_s\": %.6g, \"dp_comm_s\": %.6g, \"dp_bytes\": %.6g, \"tokens_per_s\": %.6g, "
      "\"tokens_per_s_per_gpu\": %.6g, \"tflops_per_gpu\": %.6g, \"mfu\": %.6g, \"memory_bytes\": %.6g, "
      "\"fits\": %s}",
      in.tp, in.pp, in.vp, in.cp, in.dp, in.ep, in.zero, in.micro_batch, in.microbatches, RecomputeWord(in.recompute),
      in.sequence_parallel ? "true" : "false", c.step, c.compute, c.exposed_comm, c.bubble, c.optimizer, c.tp_comm,
      c.pp_comm, c.cp_comm, c.ep_comm, c.dp_comm, c.dp_bytes, c.tokens_per_s, c.tokens_per_s_per_gpu, c.flops_per_gpu / 1e12,
      c.mfu, r.plan.total(), r.plan.fits ? "true" : "false");
}

// The speed half: rank every layout of `gpus` on the cluster, or evaluate --layout.
int SpeedPlan(jobspec::PlanInput in, const jobspec::ClusterSpec& cluster, int gpus, int global_batch, int top,
              const std::string& layout, bool json) {
  auto bad = [](const std::string& why) {
    std::fprintf(stderr, "gantry: plan: %s\n", why.c_str());
    return 2;
  };
  if (!in.model) return bad("--cluster needs the model's shape (a job spec, --preset or the shape flags)");
  if (gpus < 1) return bad("--cluster needs --gpus N");
  if (global_batch < 1) return bad("--cluster needs a global batch (the job spec's, or --global-batch N)");
  in.device_memory = cluster.device.memory;
  in.fused_attention = !cluster.device.unfused_attention;
  std::vector<jobspec::RankedLayout> rows;
  if (!layout.empty()) {
    if (auto s = ParseLayout(layout, gpus, &in); !s.ok()) return bad(std::string(s.message()));
    if (global_batch % (in.micro_batch * in.dp) != 0) {
      return bad(absl::StrFormat("the global batch %d is not a multiple of mb %d x dp %d", global_batch,
                                 in.micro_batch, in.dp));
    }
    in.microbatches = global_batch / (in.micro_batch * in.dp);
    auto plan = jobspec::MakePlan(in);
    if (!plan.ok()) return bad(std::string(plan.status().message()));
    auto cost = jobspec::PredictStep(in, cluster);
    if (!cost.ok()) return bad(std::string(cost.status().message()));
    rows.push_back({in, *plan, *cost});
  } else {
    auto ranked = jobspec::RankLayouts(in, cluster, gpus, global_batch, top);
    if (!ranked.ok()) {
      std::fprintf(stderr, "gantry: plan: %s\n", std::string(ranked.status().message()).c_str());
      return 1;
    }
    rows = *ranked;
  }
  if (json) {
    std::printf("{\"cluster\": \"%s\", \"device\": \"%s\", \"gpus\": %d, \"global_batch\": %d, \"layouts\": [", cluster.name.c_str(),
                cluster.device.name.c_str(), gpus, global_batch);
    for (size_t i = 0; i < rows.size(); ++i) std::printf("%s%s", i ? ", " : "", JsonOf(rows[i]).c_str());
    std::printf("]}\n");
    return rows[0].plan.fits ? 0 : 1;
  }
  std::printf("cluster %s: %d x %s (%d a node; %.0f GB each; links %.0f GB/s in a node, %.0f GB/s a GPU between nodes), "
              "global batch %d x %d tokens\n",
              cluster.name.c_str(), gpus, cluster.device.name.c_str(), cluster.gpus_per_node,
              cluster.device.memory / 1e9, cluster.intra.bandwidth / 1e9, cluster.inter.bandwidth / 1e9, global_batch,
              in.seq_len);
  std::printf("%-4s %-56s %9s %10s %8s %6s %9s %9s %9s %9s %8s\n", "#", "layout", "step_s", "tok/s/GPU", "TFLOP/s",
              "MFU", "compute", "comm", "bubble", "optim", "mem_GB");
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& c = rows[i].cost;
    std::printf("%-4zu %-56s %9.3f %10.0f %8.1f %5.1f%% %8.1f%% %8.1f%% %8.1f%% %8.1f%% %8.1f%s\n", i + 1,
                LayoutName(rows[i].in).c_str(), c.step, c.tokens_per_s_per_gpu, c.flops_per_gpu / 1e12, 100 * c.mfu,
                100 * c.compute / c.step, 100 * c.exposed_comm / c.step, 100 * c.bubble / c.step,
                100 * c.optimizer / c.step, rows[i].plan.total() / 1e9, rows[i].plan.fits ? "" : " (does not fit)");
  }
  const auto& best = rows[0].cost;
  std::printf("%s: %.0f tokens/s on %d GPUs; exposed communication: tensor-parallel %.3f s, pipeline %.3f s, "
              "context-parallel %.3f s, expert %.3f s, data-parallel %.3f s (of %.3f s, %.1f GB sent per GPU per step)\n",
              layout.empty() ? "best" : "layout", best.tokens_per_s, gpus, best.tp_comm, best.pp_comm, best.cp_comm,
              best.ep_comm, best.dp_comm, best.dp_comm_total, best.dp_bytes / 1e9);
  return rows[0].plan.fits ? 0 : 1;
}

}  // namespace

// plan's flags, and what they set: a job spec's or a preset's values are the base that the
// flags given change (PlanCommand parses twice: once to find the spec and the preset, once
// over the base they make).
struct PlanFlags {
  jobspec::PlanInput in;
  jobspec::GPTConfig shape;
  std::vector<std::string> spec;  // the job spec, if given
  int gpus = 0, global_batch = 0, top = 5;
  double gpu_memory_gb = 0;
  bool per_rank = false;
  std::string preset, arch = "gpt2", precision = "mixed", recompute = "none", device, cluster, layout;
};

// The flags that describe the model's shape (which --params must not meet).
const char* const kShapeFlags[] = {"preset", "n-layer", "d-model", "heads", "arch", "kv-heads", "ffn-hidden",
                                   "experts", "top-k", "moe-every", "capacity-factor", "vocab"};

void DefinePlanFlags(CommandFlags& f, PlanFlags* p) {
  jobspec::PlanInput& in = p->in;
  jobspec::GPTConfig& m = p->shape;
  f.Operands(&p->spec, 0, 1)
      // The model: a shape, or its size alone.
      .String("preset", &p->preset, "gpt2|gpt2-medium|gpt2-large|gpt2-xl", "a built-in model shape")
      .Int("n-layer", &m.n_layer, "L", "layers")
      .Int("d-model", &m.n_embd, "C", "the model's width")
      .Int("heads", &m.n_head, "H", "attention heads")
      .Int("vocab", &m.vocab_size, "V", "vocabulary size")
      .Choice("arch", &p->arch, {"gpt2", "llama"}, "the architecture")
      .Int("kv-heads", &m.n_kv_head, "K", "key/value heads (llama's grouped-query attention)")
      .Default("the heads")
      .Int("ffn-hidden", &m.ffn_hidden, "F", "the MLP's hidden width")
      .Default("4 x d-model; llama: its rule")
      .Int("experts", &m.moe.num_experts, "E", "experts per MoE layer; 0: no MoE")
      .Int("top-k", &m.moe.top_k, "K", "experts each token is routed to")
      .Int("moe-every", &m.moe.every_n_layers, "N", "an MoE layer every N layers")
      .Double("capacity-factor", &m.moe.capacity_factor, "F", "each expert's capacity, over an even share")
      .Double("params", &in.params, "N",
              "the model by its size alone (plans the model state without activations; no shape flag with it)")
      .Default("")
      .Int("seq-len", &in.seq_len, "T", "sequence length")
      // The machines.
      .Int("gpus", &p->gpus, "G", "the GPUs to lay the job out on")
      .Default("")
      .Double("gpu-memory", &p->gpu_memory_gb, "GB", "each GPU's memory")
      .Default("")
      .Choice("device", &p->device, {"cpu", "cuda", "cuda-emulated"},
              "the backend whose activations to count (cuda kinds: fused attention)")
      .Default("a job spec's resources.device, else cpu")
      // The training and its layout.
      .Choice("precision", &p->precision, {"fp32", "bf16", "fp16", "mixed"},
              "fp32, bf16 or fp16 as Gantry's train.precision; mixed: the textbook's accounting")
      .Switch("fp32-grad-accum", &in.fp32_grad_accum, "accumulate 16-bit gradients in fp32")
      .Int("zero", &in.zero, "S", "ZeRO stage (0-3)")
      .Int("tp", &in.tp, "T", "tensor-parallel degree")
      .Int("pp", &in.pp, "P", "pipeline stages")
      .Int("dp", &in.dp, "D", "data-parallel degree")
      .Default("what --gpus leaves")
      .Int("ep", &in.ep, "N", "expert-parallel degree")
      .Int("cp", &in.cp, "C", "context-parallel degree (each sequence split over C ranks; 2 x C divides seq-len)")
      .Switch("sequence-parallel", &in.sequence_parallel, "sequence parallelism in the tensor-parallel group")
      .Int("micro-batch", &in.micro_batch, "B", "sequences per micro-batch")
      .Int("microbatches", &in.microbatches, "M", "micro-batches per step")
      .Choice("recompute", &p->recompute, {"none", "selective", "full"}, "activation recomputation")
      .Int("global-batch", &p->global_batch, "N", "sequences per step (with --gpus and --gpu-memory: recommend a layout)")
      .Default("a job spec's train.global_batch")
      .Switch("ranks", &p->per_rank, "each rank's bytes (needs a model shape)")
      // Speed.
      .String("cluster", &p->cluster, "dgx-h100|dgx-h200|dgx-a100|CLUSTER.yaml",
              "rank every layout of --gpus devices that fits by predicted tokens/s (step time, tokens/s and "
              "TFLOP/s per GPU, MFU, the time split, memory per GPU)")
      .Int("top", &p->top, "K", "with --cluster: how many layouts to list")
      .String("layout", &p->layout, "tp=T,pp=P[,vp=V][,cp=C][,dp=D][,zero=S][,mb=B][,recompute=R][,sp=1][,ep=E]",
              "with --cluster: evaluate this layout only");
}

// gantry plan: the planner, locally.
int PlanCommand(const Options& o) {
  auto bad = [](const std::string& why) {
    std::fprintf(stderr, "gantry: plan: %s\n", why.c_str());
    return 2;
  };
  // First pass: the job spec and the preset, which make the base.
  PlanFlags base;
  {
    CommandFlags f = CommandFlagsFor(o);
    DefinePlanFlags(f, &base);
    if (int rc = ParseCommand(f, o); rc >= 0) return rc;
    PlanFlags fresh;
    if (!base.spec.empty()) {
      auto spec = jobspec::LoadJobSpec(base.spec[0]);
      if (!spec.ok()) return bad(std::string(spec.status().message()));
      fresh.in = jobspec::PlanOfSpec(*spec);
      fresh.in.device_memory = 0;
      fresh.global_batch = spec->train.global_batch;
      if (fresh.in.model) fresh.shape = *fresh.in.model;
    }
    if (!base.preset.empty()) {
      auto c = jobspec::ModelPreset(base.preset);
      if (!c.ok()) return bad(std::string(c.status().message()));
      fresh.shape = *c;
    }
    base = fresh;
  }
  // Second pass: the flags over the base.
  PlanFlags p = base;
  CommandFlags f = CommandFlagsFor(o);
  DefinePlanFlags(f, &p);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  jobspec::PlanInput& in = p.in;
  jobspec::GPTConfig& shape = p.shape;
  std::vector<std::string> shape_flags;  // those given, to name them
  for (const std::string& name : f.given_in_order()) {
    for (const char* s : kShapeFlags) {
      if (name == absl::StrCat("--", s)) shape_flags.push_back(name);
    }
  }
  const bool shape_given = !shape_flags.empty();
  const bool params_given = f.given("params");
  const bool dp_given = !p.spec.empty() || f.given("dp");
  if (f.given("arch")) shape.arch = p.arch == "llama" ? jobspec::Arch::kLlama : jobspec::Arch::kGpt2;
  if (f.given("gpu-memory")) in.device_memory = p.gpu_memory_gb * 1e9;
  if (f.given("precision")) {
    in.precision = p.precision == "fp32"    ? jobspec::Precision::kFp32
                   : p.precision == "mixed" ? jobspec::Precision::kMixed
                                            : jobspec::Precision::kAutocast;
  }
  if (f.given("recompute")) {
    in.recompute = p.recompute == "full"        ? jobspec::Recompute::kFull
                   : p.recompute == "selective" ? jobspec::Recompute::kSelective
                                                : jobspec::Recompute::kNone;
  }
  if (p.top < 1) return bad("--top must be at least 1");
  const int gpus = p.gpus, global_batch = p.global_batch;
  const std::string& device = p.device;
  // Two descriptions of one model never mix: a shape flag alone takes the defaults for the rest
  // of the shape (12 layers, d_model 768, ...), which would silently replace the --params given.
  if (params_given && shape_given) {
    return bad(absl::StrCat("--params describes the model by its size and ", absl::StrJoin(shape_flags, ", "),
                            " by its shape: give one of the two (--params alone plans the model state without "
                            "activations; a shape flag takes defaults for the rest of the shape: give the whole "
                            "shape, or --preset)"));
  }
  if (shape_given) {
    shape.max_seq_len = std::max(shape.max_seq_len, in.seq_len);
    if (auto s = shape.Validate(); !s.ok()) return bad(std::string(s.message()));
    in.model = shape;
  }
  if (!device.empty()) {
    // As a job on that backend runs: the cuda backends' fused attention keeps each query row's
    // log-sum-exp, not its probabilities, and in 16 bits reads a Llama's grouped key/value heads
    // as they are (jobspec::PlanOfSpec does the same from resources.device).
    in.fused_attention = device != "cpu";
    in.grouped_attention = jobspec::GroupedAttentionOf(in);
  }
  if (!p.cluster.empty()) {
    auto cluster = jobspec::LoadCluster(p.cluster);
    if (!cluster.ok()) return bad(std::string(cluster.status().message()));
    return SpeedPlan(in, *cluster, gpus, global_batch, p.top, p.layout, o.output == "json");
  }
  if (!p.layout.empty()) return bad("--layout is evaluated on a --cluster");
  if (gpus > 0 && !dp_given) in.dp = std::max(1, gpus / (in.tp * in.pp * std::max(1, in.cp)));
  auto plan = jobspec::MakePlan(in);
  if (!plan.ok()) return bad(std::string(plan.status().message()));
  double n = in.params;
  if (in.model && n <= 0) {
    for (const auto& t : jobspec::ParameterLayout(*in.model)) n += static_cast<double>(t.numel);
  }
  if (in.model && in.model->llama()) {
    std::printf("model: llama, %d layers, d_model %d, %d heads (%d key/value), ffn %d, vocab %d, T %d: %.4g parameters\n",
                in.model->n_layer, in.model->n_embd, in.model->n_head, in.model->kv_heads(), in.model->ffn(),
                in.model->vocab_size, in.seq_len, n);
  } else if (in.model && in.model->moe.num_experts > 0) {
    const jobspec::MoeConfig& m = in.model->moe;
    std::printf("model: %d layers, d_model %d, %d heads, vocab %d, T %d, %d experts (top %d) every %d layer(s): "
                "%.4g parameters\n",
                in.model->n_layer, in.model->n_embd, in.model->n_head, in.model->vocab_size, in.seq_len, m.num_experts,
                m.top_k, m.every_n_layers, n);
  } else if (in.model) {
    std::printf("model: %d layers, d_model %d, %d heads, vocab %d, T %d: %.4g parameters\n", in.model->n_layer,
                in.model->n_embd, in.model->n_head, in.model->vocab_size, in.seq_len, n);
  } else {
    std::printf("model: %.4g parameters (no shape: activations not estimated)\n", n);
  }
  std::fputs(jobspec::RenderPlan(in, *plan).c_str(), stdout);
  if (p.per_rank) {
    auto ranks = jobspec::PlanRanks(in);
    if (!ranks.ok()) return bad(std::string(ranks.status().message()));
    std::printf("\nper rank, in bytes:\n%s", jobspec::RenderRanks(in, *ranks).c_str());
  }
  if (gpus > 0 && global_batch > 0 && in.device_memory > 0) {
    auto r = jobspec::Recommend(in, gpus, global_batch);
    if (!r.ok()) {
      std::printf("recommended: none: %s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    std::printf("\nrecommended for %d GPUs of %.1f GB and a global batch of %d:\n", gpus, in.device_memory / 1e9,
                global_batch);
    std::fputs(jobspec::RenderPlan(*r, *jobspec::MakePlan(*r)).c_str(), stdout);
  }
  return plan->fits ? 0 : 1;
}

}  // namespace gantry::cli
