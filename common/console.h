// What a person sees of a training run in a terminal, written once: the step line (printed
// by gantry-train and by `gantry watch`) and the progress bar under it.
#pragma once

#include <cstdint>
#include <vector>

#include <cmath>
#include <cstdint>
#include <string>

namespace gantry {

struct StepLine {
  int64_t step = 0, steps = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double seconds = 0, tokens_per_second = 0;
  double compute_seconds = 0, comm_seconds = 0, optimizer_seconds = 0;
  double val_loss = NAN;  // shown when known
  // fp16 loss scaling, shown when loss_scale > 0: "| scale 65536 skipped 2", and "(overflow:
  // step skipped)" on a step whose update was skipped.
  double loss_scale = 0;
  bool skipped = false;
  int64_t skipped_steps = 0;
  double offload_bytes = 0;  // optimizer offload, shown when > 0: "| offload 1.2 MB"
  // Mixture of experts, shown when moe: "| moe aux 2.111 z 10.72 dropped 3.3% load 1.45" (the
  // load-balancing and z losses, the share of token-expert assignments over capacity, and the
  // busiest expert's tokens over the mean).
  bool moe = false;
  double moe_aux = 0, moe_z = 0, moe_dropped_fraction = 0, moe_load = 0;
  // A line each under the step line: "  note: cuDNN has no plan for ..." (the backend's
  // notices: a library's refusal and the path taken instead).
  std::vector<std::string> notes{};
  // Fills the moe fields from a step's routing counts.
  void SetMoe(double aux, double z, int64_t dropped, int64_t assignments, const std::vector<int64_t>& tokens_per_expert);
};

// "step    12/2500 | loss 5.474583 | lr 6.00e-05 | norm 4.7321 |    34.7 ms | 22154 tok/s |
//  compute 34.2 comm 0.0 opt 0.5 ms[ | val loss 2.6679]"
std::string FormatStepLine(const StepLine& s);

// "[=========>                    ] 12/2500  31% ETA 1m02s", for \r-redrawing on stderr.
std::string FormatProgressBar(int64_t done, int64_t total, double eta_seconds);

}  // namespace gantry
