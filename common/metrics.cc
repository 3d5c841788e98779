#include "common/metrics.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gantry::metrics {

void Counter::Inc(double v) {
  if (v < 0) return;  // counters only go up
  std::lock_guard<std::mutex> l(mu_);
  value_ += v;
}
double Counter::Value() const {
  std::lock_guard<std::mutex> l(mu_);
  return value_;
}
void Gauge::Set(double v) {
  std::lock_guard<std::mutex> l(mu_);
  value_ = v;
}
void Gauge::Add(double v) {
  std::lock_guard<std::mutex> l(mu_);
  value_ += v;
}
double Gauge::Value() const {
  std::lock_guard<std::mutex> l(mu_);
  return value_;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  std::lock_guard<std::mutex> l(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::Get() const {
  std::lock_guard<std::mutex> l(mu_);
  Snapshot s;
  s.bounds = bounds_;
  uint64_t acc = 0;
  for (uint64_t c : counts_) {
    acc += c;
    s.cumulative.push_back(acc);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

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
      .Inc();
}

Registry::Family& Registry::GetFamily(const std::string& name, const std::string& type,
                                      const std::string& help) {
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.type = type;
    it->second.help = help;
  }
  return it->second;
}

Counter& Registry::GetCounter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  auto& slot = GetFamily(name, "counter", help).counters[labels];
  if (!slot) slot = std::make_unique<Counter>();
  return *slot;
}

Gauge& Registry::GetGauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  auto& slot = GetFamily(name, "gauge", help).gauges[labels];
  if (!slot) slot = std::make_unique<Gauge>();
  return *slot;
}

Histogram& Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const std::vector<double>& bounds, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  auto& slot = GetFamily(name, "histogram", help).histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(bounds);
  return *slot;
}

namespace {

std::string Escape(const std::string& s, bool quote) {
  std::string out;
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (quote && c == '"') out += "\\\"";
    else out += c;
  }
  return out;
}

std::string Num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", v);
}

std::string LabelText(const Labels& labels, const std::string& extra_key = "",
                      const std::string& extra_value = "") {
  std::vector<std::string> parts;
  for (const auto& [k, v] : labels) parts.push_back(absl::StrCat(k, "=\"", Escape(v, true), "\""));
  if (!extra_key.empty()) parts.push_back(absl::StrCat(extra_key, "=\"", extra_value, "\""));
  if (parts.empty()) return "";
  std::string s = "{";
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? "," : "") + parts[i];
  return s + "}";
}

}  // namespace

std::string Registry::Render() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    absl::StrAppend(&out, "# HELP ", name, " ", Escape(f.help, false), "\n# TYPE ", name, " ", f.type, "\n");
    for (const auto& [labels, c] : f.counters) absl::StrAppend(&out, name, LabelText(labels), " ", Num(c->Value()), "\n");
    for (const auto& [labels, g] : f.gauges) absl::StrAppend(&out, name, LabelText(labels), " ", Num(g->Value()), "\n");
    for (const auto& [labels, h] : f.histograms) {
      const auto s = h->Get();
      for (size_t i = 0; i < s.cumulative.size(); ++i) {
        const std::string le = i < s.bounds.size() ? Num(s.bounds[i]) : "+Inf";
        absl::StrAppend(&out, name, "_bucket", LabelText(labels, "le", le), " ", s.cumulative[i], "\n");
      }
      absl::StrAppend(&out, name, "_sum", LabelText(labels), " ", Num(s.sum), "\n");
      absl::StrAppend(&out, name, "_count", LabelText(labels), " ", s.count, "\n");
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              const Registry* registry) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", address, "' is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.empty() || host == "localhost") host = "127.0.0.1";
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", address, "': not an IPv4 address"));
  }
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->registry_ = registry;
  s->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      ::listen(s->listen_fd_, 64) != 0) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", address, ": ", std::strerror(errno)));
  }
  socklen_t len = sizeof(sa);
  ::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  s->port_ = ntohs(sa.sin_port);
  if (::pipe2(s->wake_pipe_, O_CLOEXEC) != 0) return absl::InternalError("metrics: pipe failed");
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

HttpServer::~HttpServer() {
  if (wake_pipe_[1] >= 0) {
    const char c = 'x';
    (void)!::write(wake_pipe_[1], &c, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, wake_pipe_[0], wake_pipe_[1]}) {
    if (fd >= 0) ::close(fd);
  }
}

void HttpServer::Loop() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        Serve(fd);
        ::close(fd);
      }
    }
  }
}

void HttpServer::Serve(int fd) {
  // Read the request head (bounded in size and time), answer, close.
  std::string req;
  char buf[1024];
  while (req.find("\r\n\r\n") == std::string::npos && req.size() < 8192) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) <= 0) return;
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return;
    req.append(buf, static_cast<size_t>(n));
  }
  std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
  if (req.rfind("GET /metrics", 0) == 0) {
    body = registry_->Render();
  } else if (req.rfind("GET /healthz", 0) == 0) {
    body = "ok\n";
  } else {
    status = "404 Not Found";
    type = "text/plain";
    body = "not found: try /metrics\n";
  }
  const std::string resp = absl::StrCat("HTTP/1.1 ", status, "\r\nContent-Type: ", type,
                                        "\r\nContent-Length: ", body.size(),
                                        "\r\nConnection: close\r\n\r\n", body);
  size_t done = 0;
  while (done < resp.size()) {
    const ssize_t n = ::write(fd, resp.data() + done, resp.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace gantry::metrics
