#include "kernels/emulated/usage.h"

#include <atomic>
#include <chrono>
#include <mutex>

namespace gantry::emu {
namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Device {
  std::mutex mu;
  int open = 0;           // scopes open now, on any thread (mu)
  int64_t since_ns = 0;   // when open went from 0 to 1 (mu)
  uint64_t busy_ns = 0;   // closed busy intervals (mu)
  uint64_t kernels = 0;   // (mu)
  std::atomic<int64_t> allocated{0};
};
Device devices[kDeviceCount];

thread_local int current_device = 0;
thread_local int depth = 0;  // this thread's open scopes

bool Valid(int device) { return device >= 0 && device < kDeviceCount; }

}  // namespace

int CurrentDevice() { return current_device; }
void SetCurrentDevice(int device) {
  if (Valid(device)) current_device = device;
}

BusyScope::BusyScope() : device_(current_device), outer_(depth++ == 0) {
  if (!outer_) return;
  Device& d = devices[device_];
  std::lock_guard<std::mutex> l(d.mu);
  if (d.open++ == 0) d.since_ns = NowNs();
}

BusyScope::~BusyScope() {
  --depth;
  if (!outer_) return;
  Device& d = devices[device_];
  std::lock_guard<std::mutex> l(d.mu);
  ++d.kernels;
  if (--d.open == 0) d.busy_ns += static_cast<uint64_t>(NowNs() - d.since_ns);
}

void AddAllocated(int device, int64_t bytes) {
  if (Valid(device)) devices[device].allocated += bytes;
}

DeviceUsage UsageOf(int device) {
  DeviceUsage u;
  if (!Valid(device)) return u;
  Device& d = devices[device];
  std::lock_guard<std::mutex> l(d.mu);
  u.busy_ns = d.busy_ns + (d.open > 0 ? static_cast<uint64_t>(NowNs() - d.since_ns) : 0);
  u.kernels = d.kernels;
  u.allocated_bytes = d.allocated.load();
  return u;
}

}  // namespace gantry::emu
