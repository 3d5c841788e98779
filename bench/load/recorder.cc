#include "bench/load/recorder.h"

#include <algorithm>
#include <set>

namespace gantry::load {

std::vector<MethodStats> Recorder::Stats(Phase p, double window_s) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<MethodStats> out;
  std::set<std::string> methods;
  for (const auto& [m, v] : data_[p]) methods.insert(m);
  for (const auto& [m, n] : errors_[p]) methods.insert(m);
  for (const auto& m : methods) {
    MethodStats s;
    s.method = m;
    std::vector<double> v = data_[p][m];
    std::sort(v.begin(), v.end());
    s.calls = static_cast<int64_t>(v.size());
    s.errors = errors_[p][m];
    s.rate = window_s > 0 ? static_cast<double>(s.calls) / window_s : 0;
    auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
    if (!v.empty()) {
      s.p50_ms = at(0.50) * 1e3;
      s.p99_ms = at(0.99) * 1e3;
      s.max_ms = v.back() * 1e3;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace gantry::load
