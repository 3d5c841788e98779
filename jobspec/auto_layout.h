// `parallel: auto`: the layout chosen for a job spec on a number of workers, by the step cost
// model (jobspec/cost_model.h). The coordinator calls it when it places an auto job
// (coordinator/auto_placer.h); the rules are here so that the job spec's validation and the
// choice agree.
//
// What the planner chooses: dp, tp, pp, parallel.virtual_stages (the interleaved schedule, by
// RankLayouts' bounded rule), parallel.zero_stage, parallel.sequence_parallel, train.micro_batch
// and train.recompute (context parallelism, which RankLayouts also ranks, once the spec states
// parallel.cp); each stated beside auto is kept, and parallel.max_tp,
// max_pp bound tp and pp. Everything else of the spec (the global batch, precision, schedule,
// offload, ep, the optimizer's placement) is the user's and is kept: the chosen layout is one
// the spec admits by ApplyLayout (job_spec.h), the function the ranks apply it with, with the
// same global batch, so the same data order and (any layout trains to one process's losses)
// the same training.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "jobspec/cluster.h"
#include "jobspec/cost_model.h"
#include "jobspec/job_spec.h"

namespace gantry::jobspec {

// The spec's auto keys against each other and the rest (ParseJobSpec calls it; `present`:
// the fields the YAML stated). Errors name the field.
absl::Status ValidateAutoLayout(const JobSpec& spec, const std::set<std::string>& present);

// One layout for an auto spec: the spec with its layout chosen (ApplyLayout: auto off, every
// degree set; LayoutOf(spec) is what the placement carries to the ranks), and the cost model's
// figures for it.
struct LayoutChoice {
  JobSpec spec;
  RankedLayout ranked;
};

// The layouts of `world` workers the auto spec admits that fit the cluster's device memory,
// fastest first by predicted tokens/s, at most `top`: RankLayouts' order, kept to what the
// spec fixes and bounds and to what its validation accepts. NOT_FOUND saying why (no layout of
// that many: the memory the least hungry one needs against the device's), INVALID_ARGUMENT if
// the spec is not auto.
absl::StatusOr<std::vector<LayoutChoice>> ChooseLayouts(const JobSpec& spec, const ClusterSpec& cluster, int world,
                                                        int top);

// A choice as one line for the job's events: the layout, then the prediction.
//   "dp 2 x tp 1 x pp 1, ZeRO 1, recompute none, micro_batch 4 x grad_accum 1: predicted
//    step 12.3 ms, 5310 tokens/s (2655 per worker), MFU 3.1%, 0.0512 GB per worker of 8 GB"
std::string DescribeChoice(const LayoutChoice& c);

// The cluster to plan a device kind's workers on when the coordinator was given none: for
// cuda, the DGX preset of the GPU's name (H100, H200, A100; else dgx-h100's rates); for cpu and
// cuda-emulated, `cpu`: a generic x86 host's order of magnitude (fp32 GEMMs 50 GFLOP/s, 10 GB/s
// of memory, Gloo over loopback at 2 GB/s), enough to rank layouts by their compute against
// their communication, not to predict a time (gantry-train calibrate measures a host). `why`
// says which, for the event.
ClusterSpec DefaultCluster(const std::string& device_kind, const std::string& device_name, std::string* why);

}  // namespace gantry::jobspec
