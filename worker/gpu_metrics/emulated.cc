#include "worker/gpu_metrics/emulated.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "kernels/emulated/usage.h"

namespace gantry::gpu_metrics {

EmulatedSource::EmulatedSource(int first, int count, std::function<int64_t()> now_ns)
    : first_(first), now_ns_(std::move(now_ns)) {
  if (!now_ns_) {
    now_ns_ = [] {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::steady_clock::now().time_since_epoch())
          .count();
    };
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  uuid_prefix_ = absl::StrCat("EMU-", host, "-", getpid(), "-");
  const int64_t now = now_ns_();
  for (int i = 0; i < count; ++i) last_.push_back({now, emu::UsageOf(first + i).busy_ns});
}

absl::StatusOr<std::vector<GpuSample>> EmulatedSource::Sample() {
  std::vector<GpuSample> out;
  for (size_t i = 0; i < last_.size(); ++i) {
    const int device = first_ + static_cast<int>(i);
    const emu::DeviceUsage u = emu::UsageOf(device);
    const int64_t now = now_ns_();
    GpuSample s;
    s.index = device;
    s.uuid = absl::StrCat(uuid_prefix_, device);
    s.model = emu::kDeviceModel;
    const int64_t wall = now - last_[i].at_ns;
    const double busy = static_cast<double>(u.busy_ns - last_[i].busy_ns);
    // Busy time is read before the clock, so it never exceeds the wall time by more than the
    // read's own duration: the clamp only trims that.
    s.utilization = wall > 0 ? std::clamp(busy / static_cast<double>(wall), 0.0, 1.0) : 0.0;
    s.memory_used_bytes = u.allocated_bytes;
    s.memory_total_bytes = static_cast<int64_t>(emu::kDeviceBytes);
    last_[i] = {now, u.busy_ns};
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace gantry::gpu_metrics
