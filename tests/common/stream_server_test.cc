// net::StreamServer and net::StreamClient on their own, under an echo protocol (a 4-byte
// length, then that many bytes, echoed back): many clients at once, a stalled message cut at
// its deadline while an idle connection is kept, and Stop closing idle and stalled
// connections. No gRPC here, so ThreadSanitizer checks the event loop and its callers
// (tests/sanitize.sh thread leaves gRPC's server-side tests out; the data port's protocol
// tests are tests/shardserver/param_data_port_test.cc).
#include "common/stream_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/stream_client.h"
#include "tests/test_util.h"

namespace gantry::net {
namespace {

using Clock = std::chrono::steady_clock;
using gantry::testing::PollUntil;
Clock::time_point In(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

// One connection's echo loop; its callbacks keep it alive until the connection ends.
struct Echo : std::enable_shared_from_this<Echo> {
  explicit Echo(std::shared_ptr<StreamConnection> conn) : c(std::move(conn)) {}
  void Next() {
    auto self = shared_from_this();
    c->AwaitMessage([self](absl::Status s) {
      if (!s.ok()) return;
      self->c->Read(&self->len, sizeof(self->len), [self](absl::Status s) {
        if (!s.ok()) return;
        self->c->Expect(self->len);
        self->buf.resize(self->len);
        self->c->Read(self->buf.data(), self->buf.size(), [self](absl::Status s) {
          if (!s.ok()) return;
          self->c->Write({{&self->len, sizeof(self->len)}, {self->buf.data(), self->buf.size()}},
                         [self](absl::Status s) {
                           if (!s.ok()) return;
                           self->c->EndMessage();
                           self->Next();
                         });
        });
      });
    });
  }
  std::shared_ptr<StreamConnection> c;
  uint32_t len = 0;
  std::vector<char> buf;
};

std::unique_ptr<StreamServer> StartEcho(StreamServer::Options o) {
  auto s = StreamServer::Start("127.0.0.1", 0, o, [](std::shared_ptr<StreamConnection> c) {
    std::make_shared<Echo>(std::move(c))->Next();
  });
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

std::string Address(const StreamServer& s) { return "127.0.0.1:" + std::to_string(s.port()); }

// One echo of `payload` over c; the reply must be the payload.
absl::Status EchoOnce(StreamClient& c, const std::string& payload) {
  const uint32_t n = static_cast<uint32_t>(payload.size());
  if (absl::Status s = c.Send({{&n, sizeof(n)}, {payload.data(), payload.size()}}, In(20000)); !s.ok()) return s;
  uint32_t back = 0;
  if (absl::Status s = c.Receive(&back, sizeof(back), In(20000)); !s.ok()) return s;
  std::string got(back, '\0');
  if (absl::Status s = c.Receive(got.data(), got.size(), In(20000)); !s.ok()) return s;
  if (got != payload) return absl::DataLossError("the echo differs from what was sent");
  return absl::OkStatus();
}

TEST(StreamServerTest, SixtyFourClientsAtOnceEachGetTheirOwnBytesBack) {
  auto server = StartEcho({});
  ASSERT_NE(server, nullptr);
  constexpr int kClients = 64, kRounds = 12;
  std::vector<absl::Status> result(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = StreamClient::Connect(Address(*server), In(20000));
      if (!c.ok()) {
        result[i] = c.status();
        return;
      }
      for (int r = 0; r < kRounds && result[i].ok(); ++r) {
        // Sizes from a byte to 300 KB, contents that name the client and the round.
        std::string p(1 + static_cast<size_t>((i * 7919 + r * 104729) % 300000), '\0');
        for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<char>(i * 31 + r * 7 + static_cast<int>(k));
        result[i] = EchoOnce(**c, p);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) EXPECT_TRUE(result[i].ok()) << "client " << i << ": " << result[i];
  EXPECT_EQ(server->deadlines_exceeded(), 0u);
  EXPECT_TRUE(PollUntil([&] { return server->open_connections() == 0; }, std::chrono::seconds(10)))
      << server->open_connections() << " connections still open after every client left";
}

// The loop runs on two threads: a callback that takes long on one connection (a push whose
// AdamW step runs on the loop) leaves the other thread to serve the rest. With one thread the
// second client's echo waits for the first callback and misses its deadline.
TEST(StreamServerTest, ALongCallbackOnOneConnectionLeavesTheOthersServed) {
  StreamServer::Options o;
  o.threads = 2;
  std::mutex mu;
  std::condition_variable cv;
  bool busy = false, release = false;
  std::atomic<int> accepted{0};
  auto started = StreamServer::Start("127.0.0.1", 0, o, [&](std::shared_ptr<StreamConnection> c) {
    if (accepted.fetch_add(1) > 0) return std::make_shared<Echo>(std::move(c))->Next();
    c->AwaitMessage([&, c](absl::Status s) {
      if (!s.ok()) return;
      std::unique_lock<std::mutex> l(mu);
      busy = true;
      cv.notify_all();
      cv.wait_for(l, std::chrono::seconds(20), [&] { return release; });
      c->Close();
    });
  });
  ASSERT_TRUE(started.ok()) << started.status();
  StreamServer& server = **started;
  auto first = StreamClient::Connect(Address(server), In(5000));
  ASSERT_TRUE(first.ok()) << first.status();
  const char byte = 1;
  ASSERT_TRUE((*first)->Send({{&byte, 1}}, In(5000)).ok());
  {
    std::unique_lock<std::mutex> l(mu);
    ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(10), [&] { return busy; })) << "the first callback never ran";
  }
  auto second = StreamClient::Connect(Address(server), In(5000));
  ASSERT_TRUE(second.ok()) << second.status();
  const uint32_t n = 5;
  absl::Status echoed = (*second)->Send({{&n, sizeof(n)}, {"hello", 5}}, In(5000));
  std::string back(sizeof(n) + 5, '\0');
  if (echoed.ok()) echoed = (*second)->Receive(back.data(), back.size(), In(5000));
  EXPECT_TRUE(echoed.ok()) << "the second connection was not served while the first's callback ran: " << echoed;
  EXPECT_EQ(back.substr(sizeof(n)), "hello");
  {
    std::lock_guard<std::mutex> l(mu);
    release = true;
  }
  cv.notify_all();
}

TEST(StreamServerTest, AStalledMessageIsCutAtItsDeadlineAnIdleConnectionIsKept) {
  StreamServer::Options o;
  o.message_timeout = std::chrono::milliseconds(200);
  auto server = StartEcho(o);
  ASSERT_NE(server, nullptr);
  auto idle = StreamClient::Connect(Address(*server), In(5000));
  ASSERT_TRUE(idle.ok()) << idle.status();
  auto stalled = StreamClient::Connect(Address(*server), In(5000));
  ASSERT_TRUE(stalled.ok()) << stalled.status();
  const uint32_t n = 1000;
  ASSERT_TRUE((*stalled)->Send({{&n, 2}}, In(5000)).ok());  // half of the length, then nothing
  char byte;
  auto got = (*stalled)->ReceiveSome(&byte, 1, In(10000));  // the server closes it: 0 bytes, or broken
  EXPECT_TRUE(!got.ok() || *got == 0) << "the stalled connection got a byte";
  EXPECT_EQ(server->deadlines_exceeded(), 1u);
  // The idle one has waited longer than a message's deadline and is still served.
  EXPECT_TRUE(EchoOnce(**idle, "still here").ok());
}

TEST(StreamServerTest, StopClosesIdleAndStalledConnectionsAndReturns) {
  auto server = StartEcho({});
  ASSERT_NE(server, nullptr);
  auto idle = StreamClient::Connect(Address(*server), In(5000));
  ASSERT_TRUE(idle.ok()) << idle.status();
  ASSERT_TRUE(EchoOnce(**idle, "before").ok());
  auto stalled = StreamClient::Connect(Address(*server), In(5000));
  ASSERT_TRUE(stalled.ok()) << stalled.status();
  const uint32_t n = 1 << 20;
  std::string half(n / 2, 'x');
  ASSERT_TRUE((*stalled)->Send({{&n, sizeof(n)}, {half.data(), half.size()}}, In(5000)).ok());
  ASSERT_TRUE(PollUntil([&] { return server->open_connections() == 2; }, std::chrono::seconds(10)));
  const auto t0 = Clock::now();
  server->Stop(std::chrono::milliseconds(300));  // the stalled message gets its grace, then is closed
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(server->open_connections(), 0u);
  char byte;
  for (StreamClient* c : {idle->get(), stalled->get()}) {
    auto got = c->ReceiveSome(&byte, 1, In(5000));
    EXPECT_TRUE(!got.ok() || *got == 0) << "a connection is still served after Stop";
  }
  EXPECT_FALSE(StreamClient::Connect(Address(*server), In(2000)).ok()) << "the listener is still open";
}

}  // namespace
}  // namespace gantry::net
