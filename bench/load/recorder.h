// The control-plane load test's latencies: each call's time, per method and phase (before
// the coordinator's kill, during the outage, after the restart), and its errors.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "bench/load/control_plane.h"

namespace gantry::load {

// ---- Latencies, per method and phase.

enum Phase { kSteady = 0, kOutage = 1, kAfter = 2 };

class Recorder {
 public:
  void SetPhase(Phase p) {
    std::lock_guard<std::mutex> l(mu_);
    phase_ = p;
  }
  Phase phase() {
    std::lock_guard<std::mutex> l(mu_);
    return phase_;
  }
  void Add(const std::string& method, double seconds) {
    std::lock_guard<std::mutex> l(mu_);
    data_[phase_][method].push_back(seconds);
  }
  void Error(const std::string& method, const std::string& what) {
    std::lock_guard<std::mutex> l(mu_);
    ++errors_[phase_][method];
    if (phase_ != kOutage && first_error_[method].empty()) first_error_[method] = what;
  }
  std::vector<MethodStats> Stats(Phase p, double window_s);
  std::map<std::string, std::string> FirstErrors() {
    std::lock_guard<std::mutex> l(mu_);
    return first_error_;
  }

 private:
  std::mutex mu_;
  Phase phase_ = kSteady;
  std::map<std::string, std::vector<double>> data_[3];
  std::map<std::string, int64_t> errors_[3];
  std::map<std::string, std::string> first_error_;
};

}  // namespace gantry::load
