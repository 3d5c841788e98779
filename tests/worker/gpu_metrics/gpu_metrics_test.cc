// worker/gpu_metrics: the emulated devices' accounting and source, NVML through a stand-in
// library (fake_nvml.cc) and through a missing one, the exported series.
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "kernels/emulated/cuda_api.h"
#include "kernels/emulated/emulator.h"
#include "kernels/emulated/usage.h"
#include "worker/gpu_metrics/emulated.h"
#include "worker/gpu_metrics/nvml.h"
#include "worker/gpu_metrics/sampler.h"

namespace gantry::gpu_metrics {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kMs = 1000000;

void Spin(std::chrono::milliseconds d) {
  const auto end = Clock::now() + d;
  while (Clock::now() < end) {
  }
}

TEST(EmulatedUsageTest, LaunchCountsOnTheThreadsDevice) {
  emu::SetCurrentDevice(2);
  const emu::DeviceUsage before2 = emu::UsageOf(2), before3 = emu::UsageOf(3);
  emu::Launch(emu::Dim3(1), emu::Dim3(1), 0, [] { Spin(std::chrono::milliseconds(5)); });
  const emu::DeviceUsage after2 = emu::UsageOf(2), after3 = emu::UsageOf(3);
  emu::SetCurrentDevice(0);
  EXPECT_GE(after2.busy_ns - before2.busy_ns, static_cast<uint64_t>(5 * kMs));
  EXPECT_EQ(after2.kernels - before2.kernels, 1u);
  EXPECT_EQ(after3.busy_ns, before3.busy_ns);
  EXPECT_EQ(after3.kernels, before3.kernels);
}

TEST(EmulatedUsageTest, OverlappingKernelsCountOnce) {
  // Two threads' kernels on device 4 at once: busy is the union of their times, not the sum.
  const uint64_t before = emu::UsageOf(4).busy_ns;
  const auto t0 = Clock::now();
  std::atomic<int> phase{0};
  std::thread other([&] {
    emu::SetCurrentDevice(4);
    const emu::BusyScope busy;
    phase = 1;
    while (phase != 2) {
    }
  });
  while (phase != 1) {
  }
  {
    emu::SetCurrentDevice(4);
    const emu::BusyScope busy;
    const emu::BusyScope nested;  // counts with its outer scope
    Spin(std::chrono::milliseconds(10));
    phase = 2;
    other.join();
  }
  emu::SetCurrentDevice(0);
  const uint64_t busy = emu::UsageOf(4).busy_ns - before;
  const auto wall =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
  EXPECT_GE(busy, static_cast<uint64_t>(10 * kMs));
  EXPECT_LE(busy, wall);  // a sum would be at least twice the 10 ms overlap
}

TEST(EmulatedUsageTest, MemoryFollowsMallocAndFree) {
  ASSERT_EQ(emucuda::cudaSetDevice(5), emucuda::cudaSuccess);
  const int64_t before = emu::UsageOf(5).allocated_bytes, other = emu::UsageOf(1).allocated_bytes;
  void* p = nullptr;
  ASSERT_EQ(emucuda::cudaMalloc(&p, 3 << 20), emucuda::cudaSuccess);
  EXPECT_EQ(emu::UsageOf(5).allocated_bytes - before, 3 << 20);
  ASSERT_EQ(emucuda::cudaSetDevice(1), emucuda::cudaSuccess);
  ASSERT_EQ(emucuda::cudaFree(p), emucuda::cudaSuccess);  // freed from another device: counted where it was made
  EXPECT_EQ(emu::UsageOf(5).allocated_bytes, before);
  EXPECT_EQ(emu::UsageOf(1).allocated_bytes, other);
  ASSERT_EQ(emucuda::cudaSetDevice(0), emucuda::cudaSuccess);
}

TEST(EmulatedSourceTest, UtilisationIsTheBusyFractionOfEachPeriod) {
  int64_t now = 0;
  EmulatedSource source(6, 2, [&] { return now; });
  emu::SetCurrentDevice(6);
  {
    const emu::BusyScope busy;
    Spin(std::chrono::milliseconds(20));
  }
  emu::SetCurrentDevice(0);
  now = 40 * kMs;  // the period, by the source's clock: at least half of it busy on device 6
  auto samples = source.Sample();
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 2u);
  const GpuSample& s6 = (*samples)[0];
  EXPECT_EQ(s6.index, 6);
  EXPECT_EQ(s6.model, "emulated CUDA device");
  EXPECT_EQ(s6.uuid.rfind("EMU-", 0), 0u) << s6.uuid;
  ASSERT_TRUE(s6.utilization.has_value());
  EXPECT_GE(*s6.utilization, 0.5);
  EXPECT_LE(*s6.utilization, 1.0);
  EXPECT_EQ((*samples)[1].index, 7);
  EXPECT_EQ((*samples)[1].utilization, 0.0);
  EXPECT_EQ(s6.memory_total_bytes, static_cast<int64_t>(emu::kDeviceBytes));
  EXPECT_EQ(s6.memory_used_bytes, emu::UsageOf(6).allocated_bytes);
  EXPECT_FALSE(s6.power_watts || s6.temperature_celsius || s6.sm_clock_hertz || s6.ecc_uncorrected ||
               s6.throttle_reasons);  // what an emulated device has not got
  now += 10 * kMs;  // an idle period
  samples = source.Sample();
  ASSERT_TRUE(samples.ok());
  EXPECT_EQ((*samples)[0].utilization, 0.0);
}

// Counts the log lines that contain `needle`.
class LogCounter : public google::LogSink {
 public:
  explicit LogCounter(std::string needle) : needle_(std::move(needle)) { google::AddLogSink(this); }
  ~LogCounter() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity, const char*, const char*, int, const struct ::tm*, const char* message,
            size_t length) override {
    if (std::string(message, length).find(needle_) != std::string::npos) ++count;
  }
  std::atomic<int> count{0};

 private:
  std::string needle_;
};

TEST(NvmlTest, MissingLibrarySaysSoOnceAndExportsNothing) {
  const std::string missing = std::string(::testing::TempDir()) + "/no-such-dir/libnvidia-ml.so.1";
  auto source = OpenNvml(missing, {});
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(source.status().message().find(missing), std::string::npos) << source.status();

  LogCounter said("this worker exports no GPU metrics");
  metrics::Registry registry;
  SamplerOptions o;
  o.source = "auto";
  o.device_kind = "cpu";  // auto on a cpu worker: nothing, and nothing said
  auto sampler = StartSampler(o, &registry);
  ASSERT_TRUE(sampler.ok());
  EXPECT_EQ(*sampler, nullptr);
  EXPECT_EQ(said.count, 0);
  o.source = "nvml";
  o.nvml_library = missing;
  sampler = StartSampler(o, &registry);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  EXPECT_EQ(*sampler, nullptr);
  EXPECT_EQ(said.count, 1);
  EXPECT_EQ(registry.Render().find("gantry_worker_gpu_"), std::string::npos) << registry.Render();
  o.source = "dcgm";
  EXPECT_EQ(StartSampler(o, &registry).status().code(), absl::StatusCode::kInvalidArgument);
}

class FakeNvmlTest : public ::testing::Test {
 protected:
  void Use(const char* config) { setenv("GANTRY_FAKE_NVML", config, 1); }
  void TearDown() override { unsetenv("GANTRY_FAKE_NVML"); }
  const std::string lib_ = GANTRY_FAKE_NVML;
};

TEST_F(FakeNvmlTest, ReadsEveryField) {
  Use("gpus=2 util=37 mem_used=1073741824 power_mw=312500 temp=91 sm_mhz=1980 ecc_corrected=4 "
      "ecc_uncorrected_step=2 throttle=0x48");
  auto source = OpenNvml(lib_, {});
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ((*source)->name(), "nvml");
  auto samples = (*source)->Sample();
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 2u);
  const GpuSample& g = (*samples)[1];
  EXPECT_EQ(g.index, 1);
  EXPECT_EQ(g.uuid, "GPU-fa4e0000-0000-0000-0000-000000000001");
  EXPECT_EQ(g.model, "Fake GPU 80GB");
  EXPECT_EQ(g.utilization, 0.37);
  EXPECT_EQ(g.memory_used_bytes, int64_t{1} << 30);
  EXPECT_EQ(g.memory_total_bytes, int64_t{80} << 30);
  EXPECT_EQ(g.power_watts, 312.5);
  EXPECT_EQ(g.temperature_celsius, 91.0);
  EXPECT_EQ(g.sm_clock_hertz, 1980e6);
  EXPECT_EQ(g.ecc_corrected, 4u);
  EXPECT_EQ(g.ecc_uncorrected, 2u);
  EXPECT_EQ(g.throttle_reasons, 0x48u);  // through the older ThrottleReasons name
}

TEST_F(FakeNvmlTest, UnsupportedFieldsAreAbsent) {
  Use("gpus=1 temp=50 unsupported=power,ecc,throttle");
  auto source = OpenNvml(lib_, {});
  ASSERT_TRUE(source.ok()) << source.status();
  auto samples = (*source)->Sample();
  ASSERT_TRUE(samples.ok());
  const GpuSample& g = (*samples)[0];
  EXPECT_EQ(g.temperature_celsius, 50.0);
  EXPECT_FALSE(g.power_watts.has_value());
  EXPECT_FALSE(g.ecc_corrected.has_value());
  EXPECT_FALSE(g.ecc_uncorrected.has_value());
  EXPECT_FALSE(g.throttle_reasons.has_value());
}

TEST_F(FakeNvmlTest, PciBusIdsNameTheWorkersGpus) {
  Use("gpus=4");
  NvmlDevices devices;
  devices.first = 2;  // the worker's GPUs are CUDA devices 2 and 3, NVML's 3 and 1
  devices.pci_bus_ids = {"00000000:13:00.0", "00000000:11:00.0"};
  auto source = OpenNvml(lib_, devices);
  ASSERT_TRUE(source.ok()) << source.status();
  auto samples = (*source)->Sample();
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(samples->size(), 2u);
  EXPECT_EQ((*samples)[0].index, 2);
  EXPECT_EQ((*samples)[0].uuid, "GPU-fa4e0000-0000-0000-0000-000000000003");
  EXPECT_EQ((*samples)[1].index, 3);
  EXPECT_EQ((*samples)[1].uuid, "GPU-fa4e0000-0000-0000-0000-000000000001");
  devices.pci_bus_ids = {"00000000:19:00.0"};
  auto absent = OpenNvml(lib_, devices);
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("GPU 2 at PCI 00000000:19:00.0: Not Found"), std::string::npos)
      << absent.status();
}

TEST_F(FakeNvmlTest, InitFailureIsAnError) {
  Use("init=fail");
  auto source = OpenNvml(lib_, {});
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().message(), "nvmlInit: Driver Not Loaded");
}

TEST_F(FakeNvmlTest, SamplerExportsTheSeries) {
  Use("gpus=1 util=5 mem_used=2048 power_mw=70000 temp=88 sm_mhz=1410 ecc_corrected=1 ecc_uncorrected_step=3 "
      "throttle=0x40");
  metrics::Registry registry;
  SamplerOptions o;
  o.source = "nvml";
  o.device_kind = "cpu";
  o.nvml_library = lib_;
  o.period = std::chrono::hours(1);  // the test steps it
  auto sampler = StartSampler(o, &registry);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  ASSERT_NE(*sampler, nullptr);
  EXPECT_EQ((*sampler)->source_name(), "nvml");
  ASSERT_EQ((*sampler)->Latest().size(), 1u);  // the first sample is taken at start
  (*sampler)->SampleNow();
  const std::string page = registry.Render();
  const std::string gpu = R"(gpu="0",model="Fake GPU 80GB",)";
  const std::string uuid = R"(uuid="GPU-fa4e0000-0000-0000-0000-000000000000")";
  const std::string labels = gpu + uuid;  // labels in name order
  for (const std::string& line : {
           "gantry_worker_gpu_utilization_ratio{" + labels + "} 0.05",
           "gantry_worker_gpu_memory_used_bytes{" + labels + "} 2048",
           "gantry_worker_gpu_memory_total_bytes{" + labels + "} 85899345920",
           "gantry_worker_gpu_power_watts{" + labels + "} 70",
           "gantry_worker_gpu_temperature_celsius{" + labels + "} 88",
           "gantry_worker_gpu_sm_clock_hertz{" + labels + "} 1410000000",
           "gantry_worker_gpu_ecc_errors_total{" + gpu + R"(type="corrected",)" + uuid + "} 1",
           // two reads of 3 more each: the counter follows NVML's count
           "gantry_worker_gpu_ecc_errors_total{" + gpu + R"(type="uncorrected",)" + uuid + "} 6",
           "gantry_worker_gpu_throttled{" + gpu + R"(reason="hw_thermal",)" + uuid + "} 1",
           "gantry_worker_gpu_throttled{" + gpu + R"(reason="sw_power_cap",)" + uuid + "} 0",
       }) {
    EXPECT_NE(page.find(line + "\n"), std::string::npos) << "no line " << line << " in\n" << page;
  }
}

TEST(SamplerTest, EmulatedWorkerExportsItsDevices) {
  metrics::Registry registry;
  SamplerOptions o;
  o.device_kind = "cuda-emulated";  // auto: the emulated devices
  o.first = 1;
  o.count = 2;
  o.period = std::chrono::milliseconds(1);
  auto sampler = StartSampler(o, &registry);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  ASSERT_NE(*sampler, nullptr);
  EXPECT_EQ((*sampler)->source_name(), "emulated");
  const std::vector<GpuSample> latest = (*sampler)->Latest();
  ASSERT_EQ(latest.size(), 2u);
  EXPECT_EQ(latest[0].index, 1);
  EXPECT_EQ(latest[1].index, 2);
  const std::string page = registry.Render();
  EXPECT_NE(page.find("gantry_worker_gpu_memory_total_bytes{gpu=\"2\",model=\"emulated CUDA device\""),
            std::string::npos)
      << page;
  EXPECT_EQ(page.find("gantry_worker_gpu_power_watts"), std::string::npos);
  sampler->reset();  // stops its thread (1 ms period) at once
}

}  // namespace
}  // namespace gantry::gpu_metrics
