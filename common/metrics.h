// A small Prometheus metrics registry (prometheus-cpp is not packaged for Debian 12):
// counters, gauges and histograms with labels, rendered in the text exposition format
// 0.0.4, and an HTTP endpoint serving GET /metrics. Thread-safe.
// Names follow gantry_<component>_<quantity>_<unit>; counters end in _total.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::metrics {

using Labels = std::map<std::string, std::string>;

class Counter {
 public:
  void Inc(double v = 1.0);
  double Value() const;

 private:
  mutable std::mutex mu_;
  double value_ = 0;
};

class Gauge {
 public:
  void Set(double v);
  void Add(double v);
  double Value() const;

 private:
  mutable std::mutex mu_;
  double value_ = 0;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // sorted, without +Inf
  void Observe(double v);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Get() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Registry;

// One RPC's metrics, the same for every gRPC daemon: gantry_<component>_rpc_seconds
// (histogram by method) and gantry_<component>_rpcs_total (by method and code).
void RecordRpc(Registry& registry, const std::string& component, const std::string& method,
               const std::string& code, double seconds);

// Exponential bucket bounds: start, start*factor, ... (count bounds).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class Registry {
 public:
  // The same (name, labels) returns the same object. A name registered with another type
  // or help text is a programming error (CHECK-style abort in debug, first wins).
  Counter& GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& bounds, const Labels& labels = {});
  std::string Render() const;

 private:
  struct Family {
    std::string type, help;
    std::map<Labels, std::unique_ptr<Counter>> counters;
    std::map<Labels, std::unique_ptr<Gauge>> gauges;
    std::map<Labels, std::unique_ptr<Histogram>> histograms;
  };
  Family& GetFamily(const std::string& name, const std::string& type, const std::string& help);
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// Serves GET /metrics (and GET /healthz) on a TCP address; stops on destruction.
class HttpServer {
 public:
  // address is "host:port"; port 0 picks a free one (see port()).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           const Registry* registry);
  ~HttpServer();
  int port() const { return port_; }

 private:
  HttpServer() = default;
  void Loop();
  void Serve(int fd);
  const Registry* registry_ = nullptr;
  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::thread thread_;
};

}  // namespace gantry::metrics
