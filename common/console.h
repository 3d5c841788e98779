// What a person sees of a training run in a terminal, written once: the step line (printed
// by gantry-train and by `gantry watch`) and the progress bar under it.
#pragma once

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
};

// "step    12/2500 | loss 5.474583 | lr 6.00e-05 | norm 4.7321 |    34.7 ms | 22154 tok/s |
//  compute 34.2 comm 0.0 opt 0.5 ms[ | val loss 2.6679]"
std::string FormatStepLine(const StepLine& s);

// "[=========>                    ] 12/2500  31% ETA 1m02s", for \r-redrawing on stderr.
std::string FormatProgressBar(int64_t done, int64_t total, double eta_seconds);

}  // namespace gantry
