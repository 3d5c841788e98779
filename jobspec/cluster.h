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
//
// Cluster YAML:
//   name: dgx-h100
//   gpus_per_node: 8
//   gpu: h100                              # a built-in profile, or
//   profile: my-gpu.yaml                   # a profile file (relative to the cluster file), or
//   device: {name: ..., memory_gb: ...}    # the profile inline
//   intra_node: {bandwidth_gbs: 360, latency_us: 3}   # per device, one direction, achieved
//   inter_node: {bandwidth_gbs: 40, latency_us: 6}
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::jobspec {

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
