#include "worker/gpu_metrics/nvml.h"

#include <dlfcn.h>
#include <glog/logging.h>

#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

#ifdef GANTRY_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace gantry::gpu_metrics {
namespace {

// --- NVML's C API: the subset called here, as NVML's reference documents it ---
using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlMemory_t {  // bytes
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {  // percent of the last sample period
  unsigned int gpu, memory;
};
constexpr int NVML_TEMPERATURE_GPU = 0;           // nvmlTemperatureSensors_t
constexpr int NVML_CLOCK_SM = 1;                  // nvmlClockType_t
constexpr int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;  // nvmlMemoryErrorType_t
constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr int NVML_VOLATILE_ECC = 0;              // nvmlEccCounterType_t: since the driver loaded
constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

struct Api {
  nvmlReturn_t (*Init)();
  nvmlReturn_t (*Shutdown)();
  const char* (*ErrorString)(nvmlReturn_t);
  nvmlReturn_t (*GetCount)(unsigned int*);
  nvmlReturn_t (*GetHandleByIndex)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*GetHandleByPciBusId)(const char*, nvmlDevice_t*);
  nvmlReturn_t (*GetUUID)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*GetName)(nvmlDevice_t, char*, unsigned int);
  nvmlReturn_t (*GetUtilizationRates)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*GetMemoryInfo)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*GetPowerUsage)(nvmlDevice_t, unsigned int*);            // milliwatts
  nvmlReturn_t (*GetTemperature)(nvmlDevice_t, int, unsigned int*);     // degrees C
  nvmlReturn_t (*GetClockInfo)(nvmlDevice_t, int, unsigned int*);       // MHz
  nvmlReturn_t (*GetTotalEccErrors)(nvmlDevice_t, int, int, unsigned long long*);
  // nvmlDeviceGetCurrentClocksEventReasons (drivers from r535), else the older
  // nvmlDeviceGetCurrentClocksThrottleReasons: the same call under its former name.
  nvmlReturn_t (*GetClocksEventReasons)(nvmlDevice_t, unsigned long long*);
};

// dlsym into *fn; false (and names the symbol in *missing) when the library lacks it.
template <typename F>
bool Bind(void* lib, const char* symbol, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(lib, symbol));
  if (*fn == nullptr && missing->empty()) *missing = symbol;
  return *fn != nullptr;
}

class NvmlSource : public Source {
 public:
  struct Gpu {
    int index;
    nvmlDevice_t handle;
    std::string uuid, model;
  };
  NvmlSource(void* lib, Api api, std::vector<Gpu> gpus) : lib_(lib), api_(api), gpus_(std::move(gpus)) {}
  ~NvmlSource() override {
    api_.Shutdown();
    dlclose(lib_);
  }
  std::string name() const override { return "nvml"; }

  absl::StatusOr<std::vector<GpuSample>> Sample() override {
    std::vector<GpuSample> out;
    for (const Gpu& g : gpus_) {
      GpuSample s;
      s.index = g.index;
      s.uuid = g.uuid;
      s.model = g.model;
      nvmlUtilization_t util{};
      if (Ok(g, "utilization", api_.GetUtilizationRates(g.handle, &util))) s.utilization = util.gpu / 100.0;
      nvmlMemory_t mem{};
      if (Ok(g, "memory", api_.GetMemoryInfo(g.handle, &mem))) {
        s.memory_used_bytes = static_cast<int64_t>(mem.used);
        s.memory_total_bytes = static_cast<int64_t>(mem.total);
      }
      unsigned int v = 0;
      if (Ok(g, "power", api_.GetPowerUsage(g.handle, &v))) s.power_watts = v / 1000.0;
      if (Ok(g, "temperature", api_.GetTemperature(g.handle, NVML_TEMPERATURE_GPU, &v))) s.temperature_celsius = v;
      if (Ok(g, "sm clock", api_.GetClockInfo(g.handle, NVML_CLOCK_SM, &v))) s.sm_clock_hertz = v * 1e6;
      unsigned long long n = 0;
      if (Ok(g, "ecc corrected",
             api_.GetTotalEccErrors(g.handle, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC, &n))) {
        s.ecc_corrected = n;
      }
      if (Ok(g, "ecc uncorrected",
             api_.GetTotalEccErrors(g.handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &n))) {
        s.ecc_uncorrected = n;
      }
      if (Ok(g, "clock event reasons", api_.GetClocksEventReasons(g.handle, &n))) s.throttle_reasons = n;
      out.push_back(std::move(s));
    }
    return out;
  }

 private:
  // Whether a query answered. NOT_SUPPORTED (a field this GPU lacks: ECC on a board without
  // it, power on some) is quiet; another error is logged once per GPU, field and code.
  bool Ok(const Gpu& g, const char* field, nvmlReturn_t r) {
    if (r == NVML_SUCCESS) return true;
    if (r != NVML_ERROR_NOT_SUPPORTED && logged_.insert({g.index, field, r}).second) {
      LOG(WARNING) << "NVML: GPU " << g.index << " (" << g.uuid << "): " << field << ": " << api_.ErrorString(r)
                   << "; not exported while it fails";
    }
    return false;
  }

  void* lib_;
  Api api_;
  std::vector<Gpu> gpus_;
  std::set<std::tuple<int, std::string, nvmlReturn_t>> logged_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Source>> OpenNvml(const std::string& library, const NvmlDevices& devices) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return absl::NotFoundError(absl::StrCat("cannot load ", library, ": ", dlerror()));
  Api api{};
  std::string missing;
  Bind(lib, "nvmlInit_v2", &api.Init, &missing);
  Bind(lib, "nvmlShutdown", &api.Shutdown, &missing);
  Bind(lib, "nvmlErrorString", &api.ErrorString, &missing);
  Bind(lib, "nvmlDeviceGetCount_v2", &api.GetCount, &missing);
  Bind(lib, "nvmlDeviceGetHandleByIndex_v2", &api.GetHandleByIndex, &missing);
  Bind(lib, "nvmlDeviceGetHandleByPciBusId_v2", &api.GetHandleByPciBusId, &missing);
  Bind(lib, "nvmlDeviceGetUUID", &api.GetUUID, &missing);
  Bind(lib, "nvmlDeviceGetName", &api.GetName, &missing);
  Bind(lib, "nvmlDeviceGetUtilizationRates", &api.GetUtilizationRates, &missing);
  Bind(lib, "nvmlDeviceGetMemoryInfo", &api.GetMemoryInfo, &missing);
  Bind(lib, "nvmlDeviceGetPowerUsage", &api.GetPowerUsage, &missing);
  Bind(lib, "nvmlDeviceGetTemperature", &api.GetTemperature, &missing);
  Bind(lib, "nvmlDeviceGetClockInfo", &api.GetClockInfo, &missing);
  Bind(lib, "nvmlDeviceGetTotalEccErrors", &api.GetTotalEccErrors, &missing);
  std::string no_event_reasons;
  if (!Bind(lib, "nvmlDeviceGetCurrentClocksEventReasons", &api.GetClocksEventReasons, &no_event_reasons)) {
    Bind(lib, "nvmlDeviceGetCurrentClocksThrottleReasons", &api.GetClocksEventReasons, &missing);
  }
  if (!missing.empty()) {
    dlclose(lib);
    return absl::FailedPreconditionError(absl::StrCat(library, " has no ", missing, " (a driver older than NVML 7?)"));
  }
  if (nvmlReturn_t r = api.Init(); r != NVML_SUCCESS) {
    const std::string why = api.ErrorString(r);
    dlclose(lib);
    return absl::FailedPreconditionError(absl::StrCat("nvmlInit: ", why));
  }
  // An error below shuts NVML down and unloads it again.
  auto fail = [&](const std::string& what, nvmlReturn_t r) {
    const absl::Status s = absl::FailedPreconditionError(absl::StrCat(what, ": ", api.ErrorString(r)));
    api.Shutdown();
    dlclose(lib);
    return s;
  };
  std::vector<NvmlSource::Gpu> gpus;
  std::vector<std::pair<int, nvmlDevice_t>> handles;
  if (!devices.pci_bus_ids.empty()) {
    for (size_t i = 0; i < devices.pci_bus_ids.size(); ++i) {
      nvmlDevice_t h = nullptr;
      if (nvmlReturn_t r = api.GetHandleByPciBusId(devices.pci_bus_ids[i].c_str(), &h); r != NVML_SUCCESS) {
        return fail(absl::StrCat("GPU ", devices.first + i, " at PCI ", devices.pci_bus_ids[i]), r);
      }
      handles.emplace_back(devices.first + static_cast<int>(i), h);
    }
  } else {
    unsigned int count = 0;
    if (nvmlReturn_t r = api.GetCount(&count); r != NVML_SUCCESS) return fail("nvmlDeviceGetCount", r);
    for (unsigned int i = 0; i < count; ++i) {
      nvmlDevice_t h = nullptr;
      if (nvmlReturn_t r = api.GetHandleByIndex(i, &h); r != NVML_SUCCESS) return fail(absl::StrCat("GPU ", i), r);
      handles.emplace_back(static_cast<int>(i), h);
    }
  }
  for (const auto& [index, h] : handles) {
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {0}, name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {0};
    if (nvmlReturn_t r = api.GetUUID(h, uuid, sizeof(uuid)); r != NVML_SUCCESS) {
      return fail(absl::StrCat("GPU ", index, " UUID"), r);
    }
    if (nvmlReturn_t r = api.GetName(h, name, sizeof(name)); r != NVML_SUCCESS) {
      return fail(absl::StrCat("GPU ", index, " name"), r);
    }
    gpus.push_back({index, h, uuid, name});
  }
  return std::unique_ptr<Source>(std::make_unique<NvmlSource>(lib, api, std::move(gpus)));
}

absl::StatusOr<std::vector<std::string>> CudaPciBusIds(int first, int count) {
#ifdef GANTRY_WITH_CUDA
  std::vector<std::string> ids;
  for (int d = first; d < first + count; ++d) {
    char id[32] = {0};
    if (cudaError_t e = cudaDeviceGetPCIBusId(id, sizeof(id), d); e != cudaSuccess) {
      return absl::FailedPreconditionError(absl::StrCat("cudaDeviceGetPCIBusId(", d, "): ", cudaGetErrorString(e)));
    }
    ids.push_back(id);
  }
  return ids;
#else
  (void)first;
  (void)count;
  return absl::UnimplementedError("this build has no CUDA runtime");
#endif
}

}  // namespace gantry::gpu_metrics
