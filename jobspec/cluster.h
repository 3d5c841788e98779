// What the step cost model (jobspec/cost_model.h) runs a layout on: a device profile (the
// rates one GPU, or one CPU worker, achieves per kind of op) and a cluster (devices per node,
// the links inside a node and between nodes). Both are small YAML files; the built-in
// profiles (h100, h200, a100) and cluster presets (dgx-h100, dgx-h200, dgx-a100) say where
// each figure comes from. `gantry-train calibrate` measures this machine and writes a profile.
//
// Profile YAML (rates in the units the keys name; every key required unless marked):
//   name: h100
//   memory_gb: 80
//   peak_tflops: 989                       # MFU's denominator (dense 16-bit; a CPU: its fp32)
//   gemm_tflops: {bf16_fwd: 717, bf16_bwd: 651, fp32_fwd: 48, fp32_bwd: 48}
//   attention_tflops: {bf16_fwd: 325, bf16_bwd: 228, fp32_fwd: 20, fp32_bwd: 15}
//   memory_gbs: 3300                       # achieved by the memory-bound ops
//   launch_us: 4                           # optional (0): the least time an op takes
//   host_adamw_gparams: 1.0                # optional: AdamW on the host (offload), per device
//   host_link_gbs: 40                      # optional: device <-> host copies
//   unfused_attention: false               # optional: the backend's attention keeps the
//                                          # probabilities (the cpu's); rates are its GEMM's
//   gemm_table:                            # optional: GEMM rates per shape (GemmTable below),
//     - {precision: bf16, m: 768, n: 2304, k: 768, fwd_tflops: 420, bwd_tflops: 390}
//     - ...                                # `gantry-train calibrate --gemm-sweep` measures it
//
// Cluster YAML:
//   name: dgx-h100
//   gpus_per_node: 8
//   gpu: h100                              # a built-in profile, or
//   profile: my-gpu.yaml                   # a profile file (relative to the cluster file), or
//   device: {name: ..., memory_gb: ...}    # the profile inline
//   intra_node: {bandwidth_gbs: 360, latency_us: 3}   # per device, one direction, achieved
//   inter_node: {bandwidth_gbs: 40, latency_us: 6}
//   intra_node_p2p: {bandwidth_gbs: 5, latency_us: 20}  # optional: see ClusterSpec::intra_p2p
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::jobspec {

// One GEMM shape as the backend's MatmulForward(out, inp, weight, bias, N, C, OC) runs it:
// out (m, n) = inp (m, k) @ weight (k, n): m the rows (tokens), k the input width, n the output
// width. fwd: its achieved FLOP/s forward (2·m·n·k over MatmulForward's time); bwd: backward
// (4·m·n·k over MatmulBackward's: the input's gradient (m, k) and the weight's (k, n)).
// precision: the rates' index, 0 16-bit, 1 fp32 (DeviceProfile::gemm_fwd's).
struct GemmRate {
  int64_t m = 0, n = 0, k = 0;
  int precision = 0;
  double fwd = 0, bwd = 0;  // FLOP/s
};

// A device's GEMM rates per shape, per precision on a grid: every combination of the m, n and k
// values measured in that precision (the sweep's shapes: `gantry-train calibrate --gemm-sweep`).
//
// The rule between measured shapes (Rate): each of m, n, k is placed on its axis in log2 space,
// clamped to the measured range (a shape beyond the largest measured takes the largest's rate,
// one below the smallest the smallest's: the step's launch floor bounds the small ones); the
// rate is then the trilinear interpolation, in (log2 m, log2 n, log2 k), of the eight measured
// rates around it. So it is exact at a measured shape, linear in log2 of each dimension (hence
// monotone) between two neighbouring measured values, and never outside the measured rates of
// the cell's corners. A precision with no entries is empty: DeviceProfile::GemmFwd/GemmBwd then
// take the single rates (gemm_fwd, gemm_bwd).
class GemmTable {
 public:
  // The entries (any order), which must form a grid per precision: positive m, n, k and rates,
  // precision 0 or 1, no shape twice, no grid point missing. INVALID_ARGUMENT naming the entry.
  static absl::StatusOr<GemmTable> Make(std::vector<GemmRate> entries);

  bool empty() const { return entries_.empty(); }
  bool empty(int precision) const { return grid_[precision].rates.empty(); }
  // As given to Make, in its order.
  const std::vector<GemmRate>& entries() const { return entries_; }
  // The interpolated FLOP/s (the rule above); requires !empty(precision).
  double Rate(int precision, bool backward, double m, double n, double k) const;

 private:
  struct Grid {
    std::vector<double> axis[3];  // log2 of the measured m, n, k, ascending
    std::vector<double> rates;    // (fwd, bwd) at (i, j, l): 2·((i·|n| + j)·|k| + l)
  };
  std::vector<GemmRate> entries_;
  Grid grid_[2];
};

struct DeviceProfile {
  std::string name;
  double memory = 0;      // bytes
  double peak_flops = 0;  // FLOP/s
  // Achieved FLOP/s: [0] 16-bit, [1] fp32. Attention's count the causal half of the scores
  // (what a fused kernel executes).
  double gemm_fwd[2] = {0, 0}, gemm_bwd[2] = {0, 0};
  double attention_fwd[2] = {0, 0}, attention_bwd[2] = {0, 0};
  double memory_bandwidth = 0;  // bytes/s
  double launch = 0;            // seconds
  double host_adamw = 0;        // parameters/s; 0: no offload
  double host_link = 0;         // bytes/s
  // Seconds of compute lost per second of data-parallel communication that runs beside it
  // (hidden behind backward, or ZeRO 3's prefetched gathers). 0 where the collectives have
  // resources of their own (NCCL on its own SMs and copy engines); on CPU ranks whose
  // collectives run on the cores they compute on (Gloo over TCP), measured by calibrate.
  double comm_compute_cost = 0;
  // The backend keeps attention's probabilities (B, NH, T, T) and runs the scores as GEMMs
  // (the cpu backend; a GPU job may choose it too): attention_* are then unused.
  bool unfused_attention = false;
  // GEMM rates per shape (optional). Where it holds the precision, every GEMM the cost model
  // counts through the backend's Matmul* takes its rate from it; elsewhere gemm_fwd / gemm_bwd.
  GemmTable gemm_table;

  // A GEMM's FLOP/s, forward or backward, at precision index p (0 16-bit, 1 fp32) and shape
  // (m rows, n out, k in; GemmRate): the table's where it holds p, else the single rate.
  double GemmFwd(int p, double m, double n, double k) const {
    return gemm_table.empty(p) ? gemm_fwd[p] : gemm_table.Rate(p, false, m, n, k);
  }
  double GemmBwd(int p, double m, double n, double k) const {
    return gemm_table.empty(p) ? gemm_bwd[p] : gemm_table.Rate(p, true, m, n, k);
  }
};

struct Link {
  double bandwidth = 0;  // bytes/s per device, one direction, as collectives achieve it
  double latency = 0;    // seconds per message
};

struct ClusterSpec {
  std::string name;
  int gpus_per_node = 8;
  DeviceProfile device;
  Link intra, inter;
  // Point-to-point transfers between ranks of one node (a pipeline's neighbours, context
  // parallelism's ring), where they take another path than the collectives: on a CPU host
  // the shared-memory links (comm/gloo/shm_transport.h) beside Gloo's TCP collectives, as
  // `gantry-train calibrate` measures them. Unset (bandwidth 0): as intra.
  Link intra_p2p;
  const Link& NodeP2P() const { return intra_p2p.bandwidth > 0 ? intra_p2p : intra; }
};

// Built-in device profiles: "h100", "h200", "a100".
absl::StatusOr<DeviceProfile> BuiltinProfile(const std::string& name);
// Presets: "dgx-h100", "dgx-h200", "dgx-a100".
absl::StatusOr<ClusterSpec> ClusterPreset(const std::string& name);
std::vector<std::string> ClusterPresetNames();

// From YAML text (errors name the field). dir: where a cluster's `profile:` file is looked up.
absl::StatusOr<DeviceProfile> ParseProfile(const std::string& yaml);
absl::StatusOr<ClusterSpec> ParseCluster(const std::string& yaml, const std::string& dir = ".");
// A preset's name or a cluster file's path.
absl::StatusOr<ClusterSpec> LoadCluster(const std::string& name_or_path);
std::string ProfileYaml(const DeviceProfile& p);
std::string ClusterYaml(const ClusterSpec& c);  // the profile inline (device:)

}  // namespace gantry::jobspec
