// gantry-worker: flags and wiring. The agent (worker/agent/agent.h) attaches to the
// coordinator and runs each assignment in a Session (worker/agent/session.h).
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/daemon.h"
#include "common/metrics.h"
#include "worker/agent/agent.h"
#include "worker/gpu_metrics/sampler.h"
#include "worker/train/device.h"

DEFINE_string(coordinator, "127.0.0.1:7070", "coordinator address");
DEFINE_string(host, "", "host name to report (default: this machine's)");
DEFINE_string(work_dir, "", "scratch directory of the jobs (checkpoints stream to the shard servers from memory); required");
DEFINE_string(metrics_listen, "127.0.0.1:9490", "Prometheus /metrics address (port 0 picks one)");
DEFINE_int32(threads, 0, "CPU threads for training (0: all the process may use)");
DEFINE_string(device, "cpu",
              "the device this worker offers, and where its steps run: cpu, cuda[:N] (dp 1, ZeRO 0 jobs) or "
              "cuda-emulated[:N] (the CUDA code path on the CPU emulator, every layout); jobs whose "
              "resources.device names that kind are placed here, one rank per GPU (N: the first GPU's ordinal)");
DEFINE_int32(gpus, 0,
             "GPUs this worker offers (cuda kinds), from --device's ordinal on: a job's ranks here run one per "
             "GPU. 0: every GPU visible from the ordinal on (cuda), 1 (cuda-emulated). For cuda-emulated it is "
             "a fake GPU count for tests, up to 8");
DEFINE_string(attention, "auto",
              "cuda kinds: how attention runs: auto (cuDNN's fused attention for bf16/fp16 jobs where libcudnn.so.9 "
              "loads, the fused fp32 kernels otherwise), cudnn (cuDNN or an error), fused, or reference");
DEFINE_int32(heartbeat_ms, 1000, "heartbeat period");
DEFINE_double(peak_flops, 0,
              "the device's peak FLOP/s for MFU; 0 on a CPU worker: the fp32 GEMM rate measured at start");
DEFINE_string(ready_file, "", "once the metrics endpoint is up, write {\"metrics_port\": M} here");
DEFINE_string(gloo_host, "127.0.0.1", "address this worker's collectives listen on (reachable by the other ranks)");
DEFINE_int32(collective_timeout_ms, 30000, "a collective that has not completed by then is an error");
DEFINE_string(gpu_metrics, "auto",
              "where the GPU metrics (gantry_worker_gpu_*, and each GPU's utilisation and memory in the heartbeat) "
              "come from: auto (nvml for cuda, emulated for cuda-emulated, none for cpu), nvml (every GPU NVML sees "
              "on a cpu worker), emulated or none");
DEFINE_int32(gpu_metrics_period_ms, 1000, "how often the GPUs are sampled");
DEFINE_string(nvml_library, "",
              "NVML's library (default: $GANTRY_NVML_LIBRARY, else libnvidia-ml.so.1, the driver's); loaded at run "
              "time: without it the worker says so once and exports no GPU metrics");

int main(int argc, char** argv) {
  const sigset_t sigs = gantry::InitDaemon(&argc, &argv, "gantry-worker --work_dir DIR [--coordinator HOST:PORT]");
  if (FLAGS_work_dir.empty()) {
    LOG(ERROR) << "--work_dir is required";
    return 2;
  }
  auto device = gantry::train::ParseDevice(FLAGS_device);
  if (!device.ok()) {
    LOG(ERROR) << "--device: " << device.status().message();
    return 2;
  }
  auto attention = gantry::kernels::ParseAttentionPath(FLAGS_attention);
  if (!attention.ok()) {
    LOG(ERROR) << "--attention: " << attention.status().message();
    return 2;
  }
  if (auto s = gantry::train::CheckGpus(*device, FLAGS_gpus); !s.ok()) {
    LOG(ERROR) << "--gpus: " << s.message();
    return 2;
  }
  // Threads are configured (and pinned) by each job's thread, not here: a pinned main
  // thread would hand its single CPU to every thread it creates.
  gantry::metrics::Registry registry;
  auto http = gantry::metrics::HttpServer::Start(FLAGS_metrics_listen, &registry);
  if (!http.ok()) {
    LOG(ERROR) << http.status();
    return 1;
  }
  if (FLAGS_peak_flops <= 0) {
    FLAGS_peak_flops = gantry::agent::MeasureCpuPeak(FLAGS_threads);
    LOG(INFO) << "CPU fp32 GEMM rate " << FLAGS_peak_flops / 1e9 << " GFLOP/s: the peak for MFU";
  }
  gantry::gpu_metrics::SamplerOptions gpu_options;
  gpu_options.source = FLAGS_gpu_metrics;
  gpu_options.device_kind = gantry::kernels::BackendKindName(device->kind);
  gpu_options.first = device->ordinal;
  gpu_options.count = gantry::train::InventoryOf(*device, FLAGS_gpus).count;
  const char* nvml_env = std::getenv("GANTRY_NVML_LIBRARY");
  if (!FLAGS_nvml_library.empty()) {
    gpu_options.nvml_library = FLAGS_nvml_library;
  } else if (nvml_env != nullptr && *nvml_env != 0) {
    gpu_options.nvml_library = nvml_env;
  }
  gpu_options.period = std::chrono::milliseconds(std::max(FLAGS_gpu_metrics_period_ms, 1));
  auto gpus = gantry::gpu_metrics::StartSampler(gpu_options, &registry);
  if (!gpus.ok()) {
    LOG(ERROR) << "--gpu_metrics: " << gpus.status().message();
    return 2;
  }
  if (*gpus != nullptr) {
    LOG(INFO) << "GPU metrics from " << (*gpus)->source_name() << ": " << (*gpus)->Latest().size() << " GPU(s)";
  }
  gantry::WriteReadyFile(FLAGS_ready_file, 0, (*http)->port());
  std::atomic<bool> stop{false};
  std::thread signals([&] {
    gantry::WaitForTermination(sigs);
    stop = true;
  });
  gantry::agent::WorkerOptions options;
  options.coordinator = FLAGS_coordinator;
  options.host = FLAGS_host;
  options.work_dir = FLAGS_work_dir;
  options.device = FLAGS_device;
  options.attention = *attention;
  options.gpus = FLAGS_gpus;
  options.gloo_host = FLAGS_gloo_host;
  options.threads = FLAGS_threads;
  options.heartbeat_ms = FLAGS_heartbeat_ms;
  options.collective_timeout_ms = FLAGS_collective_timeout_ms;
  options.peak_flops = FLAGS_peak_flops;
  gantry::agent::RunAgent(options, &registry, &stop, gpus->get());
  signals.join();
  LOG(INFO) << "stopped";
  return 0;
}
