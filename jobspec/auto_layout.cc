#include "jobspec/auto_layout.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace gantry::jobspec {
namespace {

absl::Status FieldError(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("job spec: field '", field, "' ", why));
}

const char* RecomputeName(Recompute r) {
  return r == Recompute::kFull ? "full" : r == Recompute::kSelective ? "selective" : "none";
}

// Whether a layout keeps what the spec fixes and bounds, and the rules the spec's validation
// applies to a layout (jobspec/job_spec.cc) that RankLayouts does not already keep.
bool Admits(const JobSpec& s, const PlanInput& x) {
  const AutoLayout& a = s.parallel.auto_layout;
  if ((a.tp && x.tp != s.parallel.tp) || (a.max_tp > 0 && x.tp > a.max_tp)) return false;
  if ((a.pp && x.pp != s.parallel.pp) || (a.max_pp > 0 && x.pp > a.max_pp)) return false;
  if (a.zero_stage && x.zero != s.parallel.zero_stage) return false;
  if (a.sequence_parallel && x.sequence_parallel != s.parallel.sequence_parallel) return false;
  if (a.micro_batch && x.micro_batch != s.train.micro_batch) return false;
  if (a.recompute && x.recompute != s.recompute()) return false;
  if (s.parallel.ep > 1 && x.zero > 1) return false;  // expert groups: ZeRO 0 or 1
  if (s.optimizer.placement == "shardserver" && (x.tp > 1 || x.pp > 1 || x.zero > 2)) return false;
  if (x.sequence_parallel && (static_cast<int64_t>(x.micro_batch) * s.seq_len) % x.tp != 0) return false;
  // Context parallelism (parallel.cp): what the wiring runs (jobspec/job_spec.cc's
  // ValidateContextParallel): the optimizer on the workers; seq_len cut into 2·cp chunks. On a
  // cuda kind only where the ring's blocks run where the cost model prices attention, on cuDNN:
  // a 16-bit model (an fp32 model's blocks run on the untiled fp32 block kernels, whose speed
  // the device profile does not give), heads of 128 at most (the block kernels' limit, which
  // the job spec holds cp to on a device).
  if (x.cp > 1) {
    if (s.optimizer.placement != "worker" || s.seq_len % (2 * x.cp) != 0) return false;
    if (s.resources.device != "cpu" && (s.train.precision == "fp32" || s.model.head_dim() > 128)) return false;
  }
  return true;
}

// x as a placement's layout.
PlacedLayout LayoutOfPlan(const PlanInput& x) {
  PlacedLayout l;
  l.dp = x.dp, l.tp = x.tp, l.pp = x.pp, l.cp = x.cp;
  l.virtual_stages = x.vp;  // the interleaved schedule's chunks a stage (1: plain 1F1B)
  l.zero_stage = x.zero;
  l.sequence_parallel = x.sequence_parallel;
  l.micro_batch = x.micro_batch;
  l.recompute = RecomputeName(x.recompute);
  return l;
}

// The cpu profile DefaultCluster gives cpu and cuda-emulated workers (see auto_layout.h).
ClusterSpec CpuCluster(bool fused_attention) {
  ClusterSpec c;
  c.name = fused_attention ? "cpu (cuda-emulated)" : "cpu";
  c.gpus_per_node = 1;
  DeviceProfile& d = c.device;
  d.name = "cpu";
  d.memory = 16e9;
  d.gemm_fwd[0] = d.gemm_fwd[1] = 50e9;
  d.gemm_bwd[0] = d.gemm_bwd[1] = 40e9;
  d.peak_flops = d.gemm_fwd[1];
  // The emulator runs the fused attention kernels: at about its GEMM's rate.
  d.unfused_attention = !fused_attention;
  if (fused_attention) d.attention_fwd[0] = d.attention_fwd[1] = d.attention_bwd[0] = d.attention_bwd[1] = 20e9;
  d.memory_bandwidth = 10e9;
  d.launch = 1e-6;
  d.host_adamw = 2e8;
  d.host_link = 10e9;
  c.intra = {2e9, 30e-6};    // Gloo over loopback
  c.inter = {1.25e9, 50e-6};  // 10 Gb Ethernet
  return c;
}

}  // namespace

absl::Status ValidateAutoLayout(const JobSpec& s, const std::set<std::string>& present) {
  const AutoLayout& a = s.parallel.auto_layout;
  if (!a.enabled) {
    for (const char* f : {"parallel.max_tp", "parallel.max_pp"}) {
      if (present.count(f)) return FieldError(f, "bounds the planner's choice: it applies with parallel: auto");
    }
    return absl::OkStatus();
  }
  if (present.count("parallel.dp")) {
    return FieldError("parallel.dp",
                      "is the planner's with parallel: auto (the workers the job is placed on over tp x pp): drop it, "
                      "or drop auto and state the layout");
  }
  if (present.count("elastic.min_dp") || present.count("elastic.max_dp")) {
    return FieldError("elastic",
                      "does not combine with parallel: auto: an auto job takes resources.workers ranks, or when that "
                      "is not stated as many idle workers of its kind as its layout can use, and its layout is chosen "
                      "again at every placement");
  }
  for (const auto& [field, max, fixed, value] :
       {std::tuple{"parallel.max_tp", a.max_tp, a.tp, s.parallel.tp}, std::tuple{"parallel.max_pp", a.max_pp, a.pp, s.parallel.pp}}) {
    if (!present.count(field)) continue;
    if (max < 1) return FieldError(field, "must be >= 1");
    if (fixed) {
      return FieldError(field, absl::StrCat("bounds the planner's degree, but parallel.", std::string(field).substr(13),
                                            " is stated (", value, "): state one of them"));
    }
  }
  if (a.sequence_parallel && s.parallel.sequence_parallel && !a.tp && a.max_tp == 1) {
    return FieldError("parallel.sequence_parallel", "needs tp > 1, but parallel.max_tp is 1");
  }
  if (a.micro_batch && (s.train.micro_batch > 64 || (s.train.micro_batch & (s.train.micro_batch - 1)) != 0)) {
    return FieldError("train.micro_batch",
                      absl::StrCat("is ", s.train.micro_batch, ": with parallel: auto a stated micro_batch is one the "
                                   "planner considers, a power of two up to 64 (or leave it to the planner)"));
  }
  const int workers = s.resources.workers;
  const int fixed_group = (a.tp ? s.parallel.tp : 1) * (a.pp ? s.parallel.pp : 1);
  if (workers > 0 && workers % fixed_group != 0) {
    return FieldError("resources.workers", absl::StrCat(workers, " is not a multiple of the stated tp x pp = ", fixed_group,
                                                        " (one worker per rank)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<LayoutChoice>> ChooseLayouts(const JobSpec& spec, const ClusterSpec& cluster, int world,
                                                        int top) {
  if (!spec.auto_layout()) return absl::InvalidArgumentError("choosing a layout needs a spec with parallel: auto");
  if (world < 1 || top < 1) return absl::InvalidArgumentError("choosing a layout needs workers and a count >= 1");
  PlanInput in = PlanOfSpec(spec);
  // Candidates the spec's validation refuses are rare (the admit test keeps its rules), so a
  // few more than asked are ranked.
  ASSIGN_OR_RETURN(std::vector<RankedLayout> ranked,
                   RankLayouts(in, cluster, world, spec.train.global_batch, top + 8,
                               [&](const PlanInput& x) { return Admits(spec, x); }));
  std::vector<LayoutChoice> out;
  std::string refused;
  for (RankedLayout& r : ranked) {
    // The chosen layout is one the spec admits, by the function the ranks apply it with.
    auto placed = ApplyLayout(spec, LayoutOfPlan(r.in));
    if (!placed.ok()) {
      if (refused.empty()) refused = std::string(placed.status().message());
      continue;
    }
    out.push_back({*std::move(placed), std::move(r)});
    if (static_cast<int>(out.size()) >= top) break;
  }
  if (out.empty()) {
    return absl::NotFoundError(absl::StrCat("no layout of ", world, " workers that fits is one the job spec accepts: ", refused));
  }
  return out;
}

std::string DescribeChoice(const LayoutChoice& c) {
  const PlanInput& x = c.ranked.in;
  const StepCost& k = c.ranked.cost;
  std::string layout = absl::StrFormat("dp %d x tp %d x pp %d, ZeRO %d, recompute %s, micro_batch %d x grad_accum %d",
                                       x.dp, x.tp, x.pp, x.zero, RecomputeName(x.recompute), x.micro_batch,
                                       x.microbatches);
  if (x.sequence_parallel) absl::StrAppend(&layout, ", sequence_parallel");
  if (x.vp > 1) absl::StrAppend(&layout, ", virtual_stages ", x.vp);
  if (x.cp > 1) absl::StrAppend(&layout, ", cp ", x.cp);
  const double step = k.step >= 1 ? k.step : k.step * 1e3;
  return absl::StrFormat("%s: predicted step %.4g %s, %.0f tokens/s (%.0f per worker), MFU %.1f%%, %.3g GB per worker of %.3g GB",
                         layout, step, k.step >= 1 ? "s" : "ms", k.tokens_per_s, k.tokens_per_s_per_gpu, 100 * k.mfu,
                         c.ranked.plan.total() / 1e9, x.device_memory / 1e9);
}

ClusterSpec DefaultCluster(const std::string& device_kind, const std::string& device_name, std::string* why) {
  if (device_kind == "cuda") {
    for (const char* gpu : {"H200", "H100", "A100"}) {
      if (!absl::StrContains(device_name, gpu)) continue;
      const std::string preset = absl::StrCat("dgx-", absl::AsciiStrToLower(gpu));
      *why = absl::StrCat("no --cluster: the ", preset, " preset for ", device_name);
      return *ClusterPreset(preset);
    }
    *why = absl::StrCat("no --cluster, and no preset for '", device_name, "': the dgx-h100 preset's rates");
    return *ClusterPreset("dgx-h100");
  }
  *why = absl::StrCat("no --cluster: the generic cpu profile for ", device_kind,
                      " workers (it ranks layouts; gantry-train calibrate measures a host for --cluster)");
  return CpuCluster(device_kind == "cuda-emulated");
}

}  // namespace gantry::jobspec
