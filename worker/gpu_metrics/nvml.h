// NVIDIA's management library as a GPU metrics source. NVML is loaded at run time
// (dlopen("libnvidia-ml.so.1"), the driver's: no link dependency, so one gantry-worker binary
// runs on hosts without a driver), and its API, the part called here, is declared in nvml.cc
// from NVML's public reference (the CUDA toolkit has no nvml.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/gpu_metrics/source.h"

namespace gantry::gpu_metrics {

inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

// Which GPUs a worker exports: those with these PCI bus ids ("0000:17:00.0", CUDA's names of
// the worker's device ordinals first, first + 1, ...), or, when none are given, every GPU NVML
// sees, indexed as NVML numbers them.
struct NvmlDevices {
  int first = 0;
  std::vector<std::string> pci_bus_ids;
};

// Loads `library` (a path, or a name the loader searches), initialises NVML and finds the
// devices. An error says why (the library is missing, NVML failed to initialise, a device is
// not found): the caller then exports no GPU metrics.
absl::StatusOr<std::unique_ptr<Source>> OpenNvml(const std::string& library, const NvmlDevices& devices);

// The PCI bus ids of CUDA devices [first, first + count), from the CUDA runtime. Unimplemented
// where this build has no CUDA.
absl::StatusOr<std::vector<std::string>> CudaPciBusIds(int first, int count);

}  // namespace gantry::gpu_metrics
