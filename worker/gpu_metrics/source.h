// A worker's GPUs as its metrics see them: a Source answers one sample per GPU. Two sources:
// NVML, loaded at run time (nvml.h: a GPU worker), and the emulated devices of the CUDA
// emulator (emulated.h: a cuda-emulated worker). The Sampler (sampler.h) reads one
// periodically and exports what it reads (gantry_worker_gpu_*; docs/operations.md names each
// beside the DCGM exporter's field).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::gpu_metrics {

// NVML's clock event ("throttle") reasons, the bits of GpuSample::throttle_reasons, with the
// label each is exported under.
struct ThrottleReason {
  uint64_t bit;
  const char* label;
};
inline constexpr ThrottleReason kThrottleReasons[] = {
    {0x1, "gpu_idle"},          {0x2, "applications_clocks"}, {0x4, "sw_power_cap"},
    {0x8, "hw_slowdown"},       {0x10, "sync_boost"},         {0x20, "sw_thermal"},
    {0x40, "hw_thermal"},       {0x80, "hw_power_brake"},     {0x100, "display_clocks"},
};

// One GPU at one instant. A field the device does not report (NVML's NOT_SUPPORTED, or what
// an emulated device has not got: power, temperature, clocks, ECC, throttling) is empty and
// exported as no series.
struct GpuSample {
  int index = 0;      // the device ordinal the worker runs ranks on (its local rank's GPU)
  std::string uuid;   // NVML's "GPU-..." (emulated: "EMU-<host>-<pid>-<index>")
  std::string model;  // "NVIDIA H100 80GB HBM3", "emulated CUDA device"
  std::optional<double> utilization;  // fraction of the last period in which a kernel ran, 0..1
  std::optional<int64_t> memory_used_bytes, memory_total_bytes;
  std::optional<double> power_watts, temperature_celsius, sm_clock_hertz;
  // ECC errors since the driver loaded (NVML's volatile counts).
  std::optional<uint64_t> ecc_corrected, ecc_uncorrected;
  std::optional<uint64_t> throttle_reasons;  // kThrottleReasons' bits
};

class Source {
 public:
  virtual ~Source() = default;
  virtual std::string name() const = 0;  // "nvml", "emulated"
  // The GPUs now, in index order. An error means none could be read this time.
  virtual absl::StatusOr<std::vector<GpuSample>> Sample() = 0;
};

}  // namespace gantry::gpu_metrics
