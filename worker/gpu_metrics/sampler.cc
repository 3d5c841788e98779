#include "worker/gpu_metrics/sampler.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "worker/gpu_metrics/emulated.h"

namespace gantry::gpu_metrics {

void Exporter::Export(const std::vector<GpuSample>& samples) {
  for (const GpuSample& s : samples) {
    const metrics::Labels gpu = {{"gpu", absl::StrCat(s.index)}, {"uuid", s.uuid}, {"model", s.model}};
    auto set = [&](const char* name, const char* help, const auto& value) {
      if (value) registry_->GetGauge(name, help, gpu).Set(static_cast<double>(*value));
    };
    set("gantry_worker_gpu_utilization_ratio", "Fraction of the last sample period in which a kernel ran on the GPU",
        s.utilization);
    set("gantry_worker_gpu_memory_used_bytes", "GPU memory in use", s.memory_used_bytes);
    set("gantry_worker_gpu_memory_total_bytes", "GPU memory in all", s.memory_total_bytes);
    set("gantry_worker_gpu_power_watts", "GPU power draw", s.power_watts);
    set("gantry_worker_gpu_temperature_celsius", "GPU core temperature", s.temperature_celsius);
    set("gantry_worker_gpu_sm_clock_hertz", "GPU SM clock", s.sm_clock_hertz);
    for (const auto& [type, count] : {std::pair{"corrected", s.ecc_corrected}, {"uncorrected", s.ecc_uncorrected}}) {
      if (!count) continue;
      metrics::Labels labels = gpu;
      labels["type"] = type;
      // The counter follows NVML's count since the driver loaded; a count that went down (the
      // driver reloaded under the worker) leaves it where it is.
      uint64_t& exported = ecc_exported_[{s.uuid, type}];
      metrics::Counter& c = registry_->GetCounter("gantry_worker_gpu_ecc_errors_total",
                                                  "GPU memory ECC errors since the driver loaded", labels);
      if (*count > exported) {
        c.Increment(static_cast<double>(*count - exported));
        exported = *count;
      }
    }
    if (s.throttle_reasons) {
      for (const ThrottleReason& r : kThrottleReasons) {
        metrics::Labels labels = gpu;
        labels["reason"] = r.label;
        registry_->GetGauge("gantry_worker_gpu_throttled", "1 while this clock event (throttle) reason holds", labels)
            .Set((*s.throttle_reasons & r.bit) != 0 ? 1 : 0);
      }
    }
  }
}

Sampler::Sampler(std::unique_ptr<Source> source, metrics::Registry* registry, std::chrono::milliseconds period)
    : source_(std::move(source)), name_(source_->name()), exporter_(registry) {
  SampleNow();
  thread_ = std::thread([this, period] { Loop(period); });
}

Sampler::~Sampler() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::vector<GpuSample> Sampler::Latest() const {
  std::lock_guard<std::mutex> l(mu_);
  return latest_;
}

void Sampler::SampleNow() {
  std::lock_guard<std::mutex> sl(sample_mu_);
  absl::StatusOr<std::vector<GpuSample>> samples = source_->Sample();
  if (!samples.ok()) {
    if (!failing_) LOG(WARNING) << "GPU metrics (" << name_ << "): " << samples.status() << "; retrying each period";
    failing_ = true;
    std::lock_guard<std::mutex> l(mu_);
    latest_.clear();
    return;
  }
  failing_ = false;
  exporter_.Export(*samples);
  std::lock_guard<std::mutex> l(mu_);
  latest_ = std::move(*samples);
}

void Sampler::Loop(std::chrono::milliseconds period) {
  std::unique_lock<std::mutex> l(mu_);
  while (!cv_.wait_for(l, period, [this] { return stop_; })) {
    l.unlock();
    SampleNow();
    l.lock();
  }
}

absl::StatusOr<std::unique_ptr<Sampler>> StartSampler(const SamplerOptions& o, metrics::Registry* registry) {
  std::string source = o.source;
  if (source == "auto") {
    source = o.device_kind == "cuda" ? "nvml" : o.device_kind == "cuda-emulated" ? "emulated" : "none";
  }
  if (source == "none") return nullptr;
  if (source == "emulated") {
    return std::make_unique<Sampler>(std::make_unique<EmulatedSource>(o.first, o.count), registry, o.period);
  }
  if (source != "nvml") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown GPU metrics source ", o.source, " (auto, nvml, emulated, none)"));
  }
  NvmlDevices devices;
  devices.first = o.first;
  if (o.device_kind == "cuda") {  // the worker's GPUs by their PCI ids; NVML numbers GPUs its own way
    absl::StatusOr<std::vector<std::string>> ids = CudaPciBusIds(o.first, o.count);
    if (!ids.ok()) {
      LOG(WARNING) << "GPU metrics: cannot name this worker's GPUs for NVML (" << ids.status()
                   << "): this worker exports no GPU metrics";
      return nullptr;
    }
    devices.pci_bus_ids = *std::move(ids);
  }
  absl::StatusOr<std::unique_ptr<Source>> nvml = OpenNvml(o.nvml_library, devices);
  if (!nvml.ok()) {
    LOG(WARNING) << "GPU metrics: no NVML (" << nvml.status().message() << "): this worker exports no GPU metrics";
    return nullptr;
  }
  return std::make_unique<Sampler>(*std::move(nvml), registry, o.period);
}

}  // namespace gantry::gpu_metrics
