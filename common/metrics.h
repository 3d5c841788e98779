// Gantry's metrics on prometheus-cpp (Debian's prometheus-cpp-dev): counters, gauges and
// histograms with labels from its core, /metrics from its pull exposer (civetweb).
// Names follow gantry_<component>_<quantity>_<unit>; counters end in _total.
//
// Registry keeps the call sites short: GetCounter(name, help, labels) finds or registers the
// family by name (the first help text given for a name is the one kept) and returns the
// series for those labels, the same object for the same (name, labels); the objects are
// prometheus-cpp's own (Increment, Set, Observe, Value). Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace prometheus {
class Exposer;
}

namespace gantry::metrics {

using Labels = std::map<std::string, std::string>;
using Counter = prometheus::Counter;
using Gauge = prometheus::Gauge;
using Histogram = prometheus::Histogram;

class Registry;

// One RPC's metrics, the same for every gRPC daemon: gantry_<component>_rpc_seconds
// (histogram by method) and gantry_<component>_rpcs_total (by method and code).
void RecordRpc(Registry& registry, const std::string& component, const std::string& method,
               const std::string& code, double seconds);

// Exponential bucket bounds: start, start*factor, ... (count bounds).
std::vector<double> ExponentialBuckets(double start, double factor, int count);

class Registry {
 public:
  Registry();
  Counter& GetCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& GetGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  // Takes a gauge's series off the page (a label set no longer reported, such as a team that
  // is gone); nothing if it is not there.
  void RemoveGauge(const std::string& name, const Labels& labels);
  // The bounds (sorted, without +Inf) are those of the series' first registration.
  Histogram& GetHistogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                          const Labels& labels = {});
  // The text exposition format 0.0.4, as /metrics serves it (prometheus-cpp's serializer).
  std::string Render() const;
  // What the exposer collects.
  std::shared_ptr<prometheus::Registry> collectable() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::mutex mu_;  // the maps below (prometheus-cpp guards its families itself)
  std::map<std::string, prometheus::Family<Counter>*> counters_;
  std::map<std::string, prometheus::Family<Gauge>*> gauges_;
  std::map<std::string, prometheus::Family<Histogram>*> histograms_;
};

// Serves GET /metrics on a TCP address (prometheus-cpp's exposer); stops on destruction.
class HttpServer {
 public:
  // address is "host:port"; port 0 picks a free one (see port()).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address, const Registry* registry);
  ~HttpServer();
  int port() const { return port_; }

 private:
  HttpServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
  std::string wake_host_;  // where the destructor connects to wake the listener
};

}  // namespace gantry::metrics
