#include "common/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

namespace gantry::metrics {
namespace {

TEST(MetricsTest, RendersPrometheusTextFormat) {
  Registry r;
  r.GetCounter("gantry_test_requests_total", "Requests.", {{"method", "Get"}}).Increment(3);
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
  EXPECT_NE(text.find("gantry_test_latency_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << text;
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
  c.Increment(2);
  c.Increment(-5);
  EXPECT_EQ(c.Value(), 2);
}

TEST(MetricsTest, TheSameNameAndLabelsAreTheSameSeriesAndTheFirstHelpIsKept) {
  Registry r;
  auto& a = r.GetCounter("gantry_test_events_total", "Events.", {{"kind", "x"}});
  auto& b = r.GetCounter("gantry_test_events_total", "", {{"kind", "x"}});  // a later call site's empty help
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &r.GetCounter("gantry_test_events_total", "", {{"kind", "y"}}));
  auto& h = r.GetHistogram("gantry_test_seconds", "S.", {1, 2});
  EXPECT_EQ(&h, &r.GetHistogram("gantry_test_seconds", "S.", {5}));  // the first bounds stay
  EXPECT_NE(r.Render().find("# HELP gantry_test_events_total Events.\n"), std::string::npos) << r.Render();
}

TEST(MetricsTest, ARemovedGaugeSeriesLeavesThePageAndItsSiblingsStay) {
  Registry r;
  r.GetGauge("gantry_test_team_slots", "Slots.", {{"team", "vision"}}).Set(4);
  r.GetGauge("gantry_test_team_slots", "Slots.", {{"team", "nlp"}}).Set(2);
  r.RemoveGauge("gantry_test_team_slots", {{"team", "vision"}});
  r.RemoveGauge("gantry_test_team_slots", {{"team", "gone"}});  // never there: nothing
  r.RemoveGauge("gantry_test_no_such_family", {{"team", "nlp"}});
  const std::string text = r.Render();
  EXPECT_EQ(text.find("team=\"vision\""), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_test_team_slots{team=\"nlp\"} 2\n"), std::string::npos) << text;
  // Set again: a fresh series.
  EXPECT_EQ(r.GetGauge("gantry_test_team_slots", "", {{"team", "vision"}}).Value(), 0);
}

std::string Get(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return "connect failed";
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
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
  EXPECT_NE(resp.find("Content-Type: text/plain"), std::string::npos) << resp;  // the text format (0.0.4)
  EXPECT_NE(resp.find("gantry_test_up 1"), std::string::npos);
  EXPECT_EQ(Get((*s)->port(), "/nope").rfind("HTTP/1.1 404", 0), 0u);
}

// As in a GPU worker (cuBLASLt, the CUDA emulator): more static TLS than civetweb's 100 KB thread
// stacks hold. The server starts all the same (metrics.cc).
thread_local char big_static_tls[300 * 1024];

TEST(HttpServerTest, StartsInAProcessWithLargeStaticTls) {
  big_static_tls[0] = 1;
  asm volatile("" : : "r"(big_static_tls) : "memory");  // kept: the block stays in the binary's TLS segment
  Registry r;
  auto s = HttpServer::Start("127.0.0.1:0", &r);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(Get((*s)->port(), "/metrics").find("HTTP/1.1 200 OK"), std::string::npos);
}

TEST(HttpServerTest, StopsAtOnce) {
  // (civetweb's listener would notice the stop only at the end of its 2 s poll)
  Registry r;
  auto s = HttpServer::Start("127.0.0.1:0", &r);
  ASSERT_TRUE(s.ok()) << s.status();
  const auto t0 = std::chrono::steady_clock::now();
  s->reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1000));
}

TEST(HttpServerTest, BadAddressIsAnError) {
  Registry r;
  EXPECT_FALSE(HttpServer::Start("nonsense", &r).ok());
  EXPECT_FALSE(HttpServer::Start("127.0.0.1:99999", &r).ok());
}

}  // namespace
}  // namespace gantry::metrics
