// Gantry's metrics on prometheus-cpp (metrics.h).
#include "common/metrics.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "CivetServer.h"
#include "prometheus/exposer.h"
#include "prometheus/text_serializer.h"

// civetweb (1.15, Debian's) gives its threads 100 KB stacks, and glibc refuses to create a
// thread whose stack cannot hold the process's static TLS. A GPU worker's static TLS is
// larger than that (cuBLASLt's ~94 KB, the CUDA emulator's shared memory, OpenBLAS, glog:
// ~290 KB in all), so there the exposer could not start ("Cannot create threads"). Every
// binary linking gantry_metrics exports this definition (common/CMakeLists.txt), which raises
// a requested stack below 1 MiB to 1 MiB (address space: the pages are touched as used) and
// is glibc's otherwise. metrics_test holds 300 KB of static TLS to keep the case.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn glibc = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return glibc(attr, std::max<size_t>(size, size_t{1} << 20));
}

namespace gantry::metrics {

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) b.push_back(v);
  return b;
}

void RecordRpc(Registry& registry, const std::string& component, const std::string& method,
               const std::string& code, double seconds) {
  registry.GetHistogram(absl::StrCat("gantry_", component, "_rpc_seconds"), "RPC handling time, by method.",
                        ExponentialBuckets(1e-4, 4, 10), {{"method", method}})
      .Observe(seconds);
  registry.GetCounter(absl::StrCat("gantry_", component, "_rpcs_total"), "RPCs handled, by method and code.",
                      {{"method", method}, {"code", code}})
      .Increment();
}

Registry::Registry() : registry_(std::make_shared<prometheus::Registry>()) {}

namespace {
// HELP text as the exposition format wants it: backslash and newline escaped. (prometheus-cpp
// 1.0.1 writes the help as given; label values it escapes itself.)
std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}
}  // namespace

Counter& Registry::GetCounter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  auto& family = counters_[name];
  if (family == nullptr) family = &prometheus::BuildCounter().Name(name).Help(EscapeHelp(help)).Register(*registry_);
  return family->Add(labels);
}

Gauge& Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  auto& family = gauges_[name];
  if (family == nullptr) family = &prometheus::BuildGauge().Name(name).Help(EscapeHelp(help)).Register(*registry_);
  return family->Add(labels);
}

void Registry::RemoveGauge(const std::string& name, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = gauges_.find(name);
  if (it == gauges_.end() || !it->second->Has(labels)) return;
  it->second->Remove(&it->second->Add(labels));
}

Histogram& Registry::GetHistogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                                  const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  auto& family = histograms_[name];
  if (family == nullptr) family = &prometheus::BuildHistogram().Name(name).Help(EscapeHelp(help)).Register(*registry_);
  return family->Add(labels, prometheus::Histogram::BucketBoundaries(bounds));
}

std::string Registry::Render() const { return prometheus::TextSerializer().Serialize(registry_->Collect()); }

namespace {
// civetweb's own account of a failure to start (its log callback), for the error.
thread_local std::string civetweb_error;
int KeepCivetwebMessage(const mg_connection*, const char* message) {
  civetweb_error = message;
  return 1;
}
}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address, const Registry* registry) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", address, "' is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.empty() || host == "localhost") host = "127.0.0.1";
  in_addr ip{};
  if (inet_pton(AF_INET, host.c_str(), &ip) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", address, "': not an IPv4 address"));
  }
  std::unique_ptr<HttpServer> s(new HttpServer());
  CivetCallbacks callbacks;
  callbacks.log_message = KeepCivetwebMessage;
  civetweb_error.clear();
  try {
    s->exposer_ = std::make_unique<prometheus::Exposer>(absl::StrCat(host, ":", port), /*num_threads=*/2, &callbacks);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", address, ": ",
                                               civetweb_error.empty() ? e.what() : civetweb_error));
  }
  s->exposer_->RegisterCollectable(registry->collectable());
  const std::vector<int> ports = s->exposer_->GetListeningPorts();
  if (ports.empty()) return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", address));
  s->port_ = ports.front();
  s->wake_host_ = host == "0.0.0.0" ? "127.0.0.1" : host;
  return s;
}

HttpServer::~HttpServer() {
  if (!exposer_) return;
  // civetweb's listening thread polls in 2 s quanta and notices the stop only between them:
  // a connection to the port wakes it, so a daemon stops in milliseconds, not 2 s. The
  // connections go until the exposer is gone (civetweb closes them unanswered).
  std::atomic<bool> gone{false};
  std::thread wake([&gone, port = port_, host = wake_host_] {
    while (!gone) {
      const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(static_cast<uint16_t>(port));
      inet_pton(AF_INET, host.c_str(), &sa.sin_addr);
      (void)::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
      ::close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  exposer_.reset();
  gone = true;
  wake.join();
}

}  // namespace gantry::metrics
