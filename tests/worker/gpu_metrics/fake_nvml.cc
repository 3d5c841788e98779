// A stand-in for libnvidia-ml.so.1, for the tests of worker/gpu_metrics on machines without a
// GPU: the NVML entry points OpenNvml binds, with NVML's signatures and return codes, answering
// what the environment variable GANTRY_FAKE_NVML says when nvmlInit_v2 is called, as
// space-separated key=value pairs (defaults in Config):
//   gpus=N  util=PERCENT  mem_used=BYTES  power_mw=MW  temp=C  sm_mhz=MHZ  ecc_corrected=N
//   ecc_uncorrected_step=N (each read of a GPU's uncorrected count adds N: errors that keep coming)
//   throttle=BITS (hex or decimal)  unsupported=power,temp,ecc,...  init=fail
// GPU i is at PCI bus id 00000000:(0x10 + i):00.0. Only the older name of the clock event
// reasons call is exported (nvmlDeviceGetCurrentClocksThrottleReasons), so the fallback is tested.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

namespace {

struct Config {
  unsigned gpus = 1;
  unsigned util = 0;
  unsigned long long mem_used = 0, mem_total = 80ull << 30;
  unsigned power_mw = 0, temp = 0, sm_mhz = 0;
  unsigned long long ecc_corrected = 0, ecc_uncorrected_step = 0;
  unsigned long long throttle = 0;
  std::set<std::string> unsupported;
  bool init_fails = false;
};
std::mutex mu;
Config config;
unsigned long long uncorrected[64];

constexpr int kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6, kDriverNotLoaded = 9;

void Parse(const char* env) {
  config = Config();
  std::memset(uncorrected, 0, sizeof(uncorrected));
  std::istringstream in(env == nullptr ? "" : env);
  std::string kv;
  while (in >> kv) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    const unsigned long long n = std::strtoull(v.c_str(), nullptr, 0);
    if (k == "gpus") config.gpus = static_cast<unsigned>(n < 64 ? n : 64);
    if (k == "util") config.util = static_cast<unsigned>(n);
    if (k == "mem_used") config.mem_used = n;
    if (k == "power_mw") config.power_mw = static_cast<unsigned>(n);
    if (k == "temp") config.temp = static_cast<unsigned>(n);
    if (k == "sm_mhz") config.sm_mhz = static_cast<unsigned>(n);
    if (k == "ecc_corrected") config.ecc_corrected = n;
    if (k == "ecc_uncorrected_step") config.ecc_uncorrected_step = n;
    if (k == "throttle") config.throttle = n;
    if (k == "init") config.init_fails = v == "fail";
    if (k == "unsupported") {
      std::istringstream names(v);
      std::string name;
      while (std::getline(names, name, ',')) config.unsupported.insert(name);
    }
  }
}

// A device handle is its index + 1 (never null).
int IndexOf(void* device) {
  const auto i = static_cast<long>(reinterpret_cast<intptr_t>(device)) - 1;
  return i >= 0 && i < static_cast<long>(config.gpus) ? static_cast<int>(i) : -1;
}
void* HandleOf(unsigned i) { return reinterpret_cast<void*>(static_cast<intptr_t>(i) + 1); }

}  // namespace

extern "C" {

int nvmlInit_v2() {
  std::lock_guard<std::mutex> l(mu);
  Parse(std::getenv("GANTRY_FAKE_NVML"));
  return config.init_fails ? kDriverNotLoaded : kSuccess;
}
int nvmlShutdown() { return kSuccess; }
const char* nvmlErrorString(int r) {
  switch (r) {
    case kSuccess: return "Success";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kNotFound: return "Not Found";
    case kDriverNotLoaded: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  std::lock_guard<std::mutex> l(mu);
  *count = config.gpus;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** device) {
  std::lock_guard<std::mutex> l(mu);
  if (i >= config.gpus) return kInvalidArgument;
  *device = HandleOf(i);
  return kSuccess;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* id, void** device) {
  std::lock_guard<std::mutex> l(mu);
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4 || bus < 0x10 || bus - 0x10 >= config.gpus) {
    return kNotFound;
  }
  *device = HandleOf(bus - 0x10);
  return kSuccess;
}
int nvmlDeviceGetUUID(void* device, char* out, unsigned length) {
  const int i = IndexOf(device);
  if (i < 0) return kInvalidArgument;
  std::snprintf(out, length, "GPU-fa4e0000-0000-0000-0000-%012d", i);
  return kSuccess;
}
int nvmlDeviceGetName(void* device, char* out, unsigned length) {
  if (IndexOf(device) < 0) return kInvalidArgument;
  std::snprintf(out, length, "Fake GPU 80GB");
  return kSuccess;
}

#define FAKE_FIELD(name)                                               \
  std::lock_guard<std::mutex> l(mu);                                   \
  const int i = IndexOf(device);                                       \
  if (i < 0) return kInvalidArgument;                                  \
  if (config.unsupported.count(name)) return kNotSupported;

int nvmlDeviceGetUtilizationRates(void* device, unsigned* util /* {gpu, memory} */) {
  FAKE_FIELD("util");
  util[0] = config.util;
  util[1] = 0;
  return kSuccess;
}
int nvmlDeviceGetMemoryInfo(void* device, unsigned long long* mem /* {total, free, used} */) {
  FAKE_FIELD("memory");
  mem[0] = config.mem_total;
  mem[1] = config.mem_total - config.mem_used;
  mem[2] = config.mem_used;
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned* mw) {
  FAKE_FIELD("power");
  *mw = config.power_mw;
  return kSuccess;
}
int nvmlDeviceGetTemperature(void* device, int sensor, unsigned* c) {
  FAKE_FIELD("temp");
  if (sensor != 0) return kInvalidArgument;
  *c = config.temp;
  return kSuccess;
}
int nvmlDeviceGetClockInfo(void* device, int type, unsigned* mhz) {
  FAKE_FIELD("clock");
  *mhz = type == 1 ? config.sm_mhz : 0;
  return kSuccess;
}
int nvmlDeviceGetTotalEccErrors(void* device, int type, int counter, unsigned long long* n) {
  FAKE_FIELD("ecc");
  if (counter != 0 || (type != 0 && type != 1)) return kInvalidArgument;  // volatile counts only
  *n = type == 0 ? config.ecc_corrected : (uncorrected[i] += config.ecc_uncorrected_step);
  return kSuccess;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(void* device, unsigned long long* reasons) {
  FAKE_FIELD("throttle");
  *reasons = config.throttle;
  return kSuccess;
}

}  // extern "C"
