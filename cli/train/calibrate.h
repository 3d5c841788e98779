// gantry-train calibrate: this machine as a device profile for the step cost model
// (jobspec/cluster.h), measured through the code a CPU worker runs: the cpu backend's GEMMs
// (kernels/matmul.h) and attention at a layer's shapes, fp32 and bf16, forward and backward; its
// memory-bound ops' bandwidth (the residual add); the host AdamW and copies (offload); and
// Gloo's all-reduce between ranks of this process over loopback (comm/gloo), as the
// links of a cluster of one node.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "jobspec/cluster.h"

namespace gantry::calibrate {

struct Options {
  int threads = 1;  // per rank (a worker's --threads)
  int ranks = 2;    // Gloo ranks (threads of this process) for the link; also the node's size
  // The shapes to time: a layer of width n_embd over `rows` tokens of sequences of seq_len.
  int n_embd = 256, n_head = 4, seq_len = 128, rows = 512;
  int repeats = 5;  // the median of these
};

// Measures; the profile's name is "cpu-<threads>t".
absl::StatusOr<jobspec::ClusterSpec> Calibrate(const Options& o);

}  // namespace gantry::calibrate
