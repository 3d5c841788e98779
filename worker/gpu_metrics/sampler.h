// A worker's GPU metrics: a Sampler reads its Source every period, on a thread of its own,
// and exports each sample into the worker's registry; the heartbeat reads the latest sample
// (`gantry workers` shows each GPU's utilisation and memory). Series, labelled by gpu (the
// device ordinal), uuid and model (docs/operations.md has the DCGM exporter's equivalents):
//   gantry_worker_gpu_utilization_ratio       fraction of the period a kernel ran
//   gantry_worker_gpu_memory_used_bytes, gantry_worker_gpu_memory_total_bytes
//   gantry_worker_gpu_power_watts, gantry_worker_gpu_temperature_celsius,
//   gantry_worker_gpu_sm_clock_hertz
//   gantry_worker_gpu_ecc_errors_total{type=corrected|uncorrected}  since the driver loaded
//   gantry_worker_gpu_throttled{reason}       1 while that clock event reason holds, else 0
// A field the source does not report is no series.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/metrics.h"
#include "worker/gpu_metrics/nvml.h"
#include "worker/gpu_metrics/source.h"

namespace gantry::gpu_metrics {

// Sets the series of each sample.
class Exporter {
 public:
  explicit Exporter(metrics::Registry* registry) : registry_(registry) {}
  void Export(const std::vector<GpuSample>& samples);

 private:
  metrics::Registry* registry_;
  std::map<std::pair<std::string, std::string>, uint64_t> ecc_exported_;  // (uuid, type) → the counter's value
};

class Sampler {
 public:
  // Takes the first sample before it returns, then one every period until destroyed.
  Sampler(std::unique_ptr<Source> source, metrics::Registry* registry, std::chrono::milliseconds period);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  const std::string& source_name() const { return name_; }
  // The last sample read (empty until one succeeds, or after a failed one).
  std::vector<GpuSample> Latest() const;
  // Reads and exports one sample now (the thread's step; tests call it to step by hand).
  void SampleNow();

 private:
  void Loop(std::chrono::milliseconds period);

  std::unique_ptr<Source> source_;
  const std::string name_;
  Exporter exporter_;
  std::mutex sample_mu_;  // one sample at a time (source_, exporter_, failing_)
  bool failing_ = false;  // the last sample failed (logged once until one succeeds)
  mutable std::mutex mu_;  // latest_, stop_
  std::condition_variable cv_;
  std::vector<GpuSample> latest_;
  bool stop_ = false;
  std::thread thread_;
};

// What a worker exports, from its flags.
struct SamplerOptions {
  std::string source = "auto";  // auto (by device kind), nvml, emulated or none
  std::string device_kind;      // "cpu", "cuda", "cuda-emulated"
  int first = 0, count = 0;     // the worker's GPUs: device ordinals [first, first + count)
  std::string nvml_library = kNvmlLibrary;
  std::chrono::milliseconds period{1000};
};
// The worker's sampler; null where it exports no GPU metrics (a cpu worker under auto, or
// none), saying why once in the log where GPUs were expected (NVML missing or failing). An
// unknown source name is an error.
absl::StatusOr<std::unique_ptr<Sampler>> StartSampler(const SamplerOptions& options, metrics::Registry* registry);

}  // namespace gantry::gpu_metrics
