#include "common/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace gantry::metrics {
namespace {

TEST(MetricsTest, RendersPrometheusTextFormat) {
  Registry r;
  r.GetCounter("gantry_test_requests_total", "Requests.", {{"method", "Get"}}).Inc(3);
  r.GetGauge("gantry_test_temperature_celsius", "A \"quoted\" help\\text.").Set(-1.5);
  auto& h = r.GetHistogram("gantry_test_latency_seconds", "Latency.", {0.1, 1.0});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(7);
  const std::string text = r.Render();
  EXPECT_NE(text.find("# TYPE gantry_test_requests_total counter\ngantry_test_requests_total{method=\"Get\"} 3\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("gantry_test_temperature_celsius -1.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# HELP gantry_test_temperature_celsius A \"quoted\" help\\\\text.\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_test_latency_seconds_bucket{le=\"0.10000000000000001\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_test_latency_seconds_bucket{le=\"1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_test_latency_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_test_latency_seconds_count 3\n"), std::string::npos) << text;
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  Registry r;
  r.GetGauge("gantry_test_x", "X.", {{"path", "a\"b\\c\nd"}}).Set(1);
  EXPECT_NE(r.Render().find("gantry_test_x{path=\"a\\\"b\\\\c\\nd\"} 1"), std::string::npos) << r.Render();
}

TEST(MetricsTest, CountersNeverGoDown) {
  Registry r;
  auto& c = r.GetCounter("gantry_test_total", "T.");
  c.Inc(2);
  c.Inc(-5);
  EXPECT_EQ(c.Value(), 2);
}

std::string Get(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return "connect failed";
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(HttpServerTest, ServesMetricsOnAnEphemeralPort) {
  Registry r;
  r.GetGauge("gantry_test_up", "Up.").Set(1);
  auto s = HttpServer::Start("127.0.0.1:0", &r);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_GT((*s)->port(), 0);
  const std::string resp = Get((*s)->port(), "/metrics");
  EXPECT_EQ(resp.rfind("HTTP/1.1 200 OK", 0), 0u) << resp;
  EXPECT_NE(resp.find("text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(resp.find("gantry_test_up 1"), std::string::npos);
  EXPECT_EQ(Get((*s)->port(), "/nope").rfind("HTTP/1.1 404", 0), 0u);
}

TEST(HttpServerTest, BadAddressIsAnError) {
  Registry r;
  EXPECT_FALSE(HttpServer::Start("nonsense", &r).ok());
  EXPECT_FALSE(HttpServer::Start("127.0.0.1:99999", &r).ok());
}

}  // namespace
}  // namespace gantry::metrics
