// The CUDA emulator's devices as GPUs (a cuda-emulated worker's): utilisation is the fraction
// of the time since the previous sample in which one of the device's kernels ran (launches and
// the cuBLAS/cuDNN stand-ins, kernels/emulated/usage.h), memory what cudaMalloc holds on it out
// of the emulated device's 80 GiB. An emulated device has no power, temperature, clocks, ECC
// or throttling: those fields stay empty.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "worker/gpu_metrics/source.h"

namespace gantry::gpu_metrics {

class EmulatedSource : public Source {
 public:
  // Devices [first, first + count) of the emulator (the worker's --device ordinal, --gpus).
  // now_ns: a steady clock (tests may pass their own); the first sample's period starts here.
  EmulatedSource(int first, int count, std::function<int64_t()> now_ns = {});
  std::string name() const override { return "emulated"; }
  absl::StatusOr<std::vector<GpuSample>> Sample() override;

 private:
  struct Last {
    int64_t at_ns;
    uint64_t busy_ns;
  };
  const int first_;
  std::function<int64_t()> now_ns_;
  std::string uuid_prefix_;  // "EMU-<host>-<pid>-"
  std::vector<Last> last_;   // per device, at the previous sample
};

}  // namespace gantry::gpu_metrics
