// The parameter server's data port (shardserver/param_service_data_port.cc over
// common/stream_server.h): many connections at once, some hostile, lose nothing of the
// others; a request stalled half-way is cut at its deadline while an idle connection stays;
// the server reads no request ahead of its reply and accepts no connection past its limit;
// Stop and SIGTERM end it cleanly with connections open. Deadlines are shortened by the
// server's options, and every wait is on a condition with a deadline.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "common/param_wire.h"
#include "common/stream_client.h"
#include "shardserver/param_service.h"
#include "tests/test_util.h"

namespace gantry::shardserver {
namespace {

using Clock = std::chrono::steady_clock;
using net::ParamWireHeader;
using net::StreamClient;

Clock::time_point In(int ms) { return Clock::now() + std::chrono::milliseconds(ms); }

// A request's bytes: header, job, payload.
std::string Request(uint32_t op, const std::string& job, int64_t step, int64_t offset, size_t count,
                    const float* payload = nullptr, v1::RangeBuffer buffer = v1::PARAMS) {
  ParamWireHeader h;
  h.op = op;
  h.generation = 1;
  h.step = step;
  h.lr = 1e-2;
  h.offset = offset;
  h.count = static_cast<int64_t>(count);
  h.buffer = static_cast<uint32_t>(buffer);
  h.job_len = static_cast<uint32_t>(job.size());
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out += job;
  if (payload != nullptr) out.append(reinterpret_cast<const char*>(payload), count * sizeof(float));
  return out;
}

// The reply to one request: its status (code and message), version, and for a read the values.
struct Reply {
  absl::Status status;
  int64_t version = -1;
};
absl::StatusOr<Reply> ReadReply(StreamClient& c, float* values, size_t count, int deadline_ms = 20000) {
  net::ParamWireReply r;
  const auto d = In(deadline_ms);
  if (auto s = c.Receive(&r, sizeof(r), d); !s.ok()) return s;
  std::string msg(r.message_len, '\0');
  if (auto s = c.Receive(msg.data(), msg.size(), d); !s.ok()) return s;
  if (r.code == 0 && values != nullptr) {
    if (auto s = c.Receive(values, count * sizeof(float), d); !s.ok()) return s;
  }
  return Reply{absl::Status(static_cast<absl::StatusCode>(r.code), msg), r.version};
}

absl::StatusOr<Reply> Call(StreamClient& c, const std::string& request, float* values = nullptr, size_t count = 0) {
  if (auto s = c.Send({{request.data(), request.size()}}, In(20000)); !s.ok()) return s;
  return ReadReply(c, values, count);
}

std::unique_ptr<StreamClient> Dial(const std::string& address) {
  auto c = StreamClient::Connect(address, In(10000));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// Whether the server closed this connection (after any replies) before the deadline.
bool ClosedByServer(StreamClient& c, int deadline_ms) {
  char buf[1 << 16];
  const auto d = In(deadline_ms);
  for (;;) {
    auto got = c.ReceiveSome(buf, sizeof(buf), d);
    if (!got.ok()) return absl::IsUnavailable(got.status());  // reset by the server
    if (*got == 0) return true;
  }
}

// A ParamService with an in-process gRPC server (InitRange, reads for comparison) and its
// data port started with `options`.
class DataPortTest : public ::testing::Test {
 protected:
  void StartServer(net::StreamServer::Options options) {
    service_ = std::make_unique<ParamService>(&registry_);
    grpc::ServerBuilder b;
    b.SetMaxReceiveMessageSize(64 << 20);
    b.SetMaxSendMessageSize(64 << 20);
    b.RegisterService(service_.get());
    server_ = b.BuildAndStart();
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    stub_ = v1::ParamServer::NewStub(server_->InProcessChannel(args));
    auto addr = service_->StartDataPort("127.0.0.1", options);
    ASSERT_TRUE(addr.ok()) << addr.status();
    address_ = *addr;
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  void InitRange(const std::string& job, int64_t begin, int64_t end) {
    grpc::ClientContext ctx;
    v1::InitRangeRequest r;
    r.set_job_id(job);
    r.set_generation(1);
    r.mutable_range()->set_begin(begin);
    r.mutable_range()->set_end(end);
    r.set_beta1(0.9);
    r.set_beta2(0.95);
    r.set_eps(1e-8);
    r.set_weight_decay(0.1);
    auto* d = r.add_decay();
    d->set_begin(begin);
    d->set_end(begin + (end - begin) / 2);
    v1::InitRangeResponse resp;
    const grpc::Status s = stub_->InitRange(&ctx, r, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  // Through gRPC, in messages of 1M values: the values and the steps applied.
  std::pair<std::vector<float>, int64_t> GrpcRead(const std::string& job, int64_t offset, int64_t count) {
    std::vector<float> v;
    int64_t version = -1;
    for (int64_t at = offset; at < offset + count; at += 1 << 20) {
      grpc::ClientContext ctx;
      v1::ReadParamsRequest r;
      r.set_job_id(job);
      r.set_generation(1);
      r.set_offset(at);
      r.set_count(std::min<int64_t>(1 << 20, offset + count - at));
      v1::ParamsChunk c;
      const grpc::Status s = stub_->ReadParams(&ctx, r, &c);
      EXPECT_TRUE(s.ok()) << s.error_message();
      const size_t had = v.size();
      v.resize(had + c.data().size() / sizeof(float));
      std::memcpy(v.data() + had, c.data().data(), c.data().size());
      version = c.version();
    }
    return {v, version};
  }
  void GrpcWrite(const std::string& job, int64_t offset, const std::vector<float>& v) {
    grpc::ClientContext ctx;
    v1::ParamsChunk c;
    c.set_job_id(job);
    c.set_generation(1);
    c.set_offset(offset);
    c.set_data(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
    v1::ParamsAck ack;
    const grpc::Status s = stub_->WriteParams(&ctx, c, &ack);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  void GrpcPush(const std::string& job, int64_t step, int64_t offset, const std::vector<float>& g) {
    grpc::ClientContext ctx;
    v1::GradientChunk c;
    c.set_job_id(job);
    c.set_generation(1);
    c.set_step(step);
    c.set_lr(1e-2);
    c.set_offset(offset);
    c.set_data(reinterpret_cast<const char*>(g.data()), g.size() * sizeof(float));
    v1::PushAck ack;
    const grpc::Status s = stub_->PushGradients(&ctx, c, &ack);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  metrics::Registry registry_;
  std::unique_ptr<ParamService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ParamServer::Stub> stub_;
  std::string address_;
};

// Worker w's parameters and gradients: values no other slice has.
float Param(size_t i) { return 0.25f + static_cast<float>(i % 9973) * 1e-4f; }
float Grad(size_t i) { return static_cast<float>(static_cast<int>(i % 601) - 300) * 1e-3f; }

// 256 connections held at once: 160 workers of one job each write, push and read back their
// slices through the data port, while 96 others send garbage (a wrong magic; a right magic
// with absurd sizes), stall half-way through a header or a payload, or ask for 20 MB of
// another job and never read it. Every worker's values arrive intact (the job's parameters after the step
// equal those of a twin job stepped through gRPC with the same bytes), and every hostile
// connection is answered with an error or cut at its deadline.
TEST_F(DataPortTest, TwoHundredFiftySixConnectionsSomeHostileLoseNothingOfTheOthers) {
  net::StreamServer::Options options;
  options.message_timeout = std::chrono::milliseconds(1000);
  StartServer(options);
  constexpr int kWorkers = 160, kGarbage = 32, kStalled = 64;
  constexpr size_t kSlice = 32768;  // floats per worker: the job's range is 20 MB
  constexpr size_t kN = kWorkers * kSlice;
  InitRange("j-good", 0, kN);
  InitRange("j-twin", 0, kN);
  InitRange("j-stall", 0, 4096);
  InitRange("j-unread", 0, kN);

  // Every connection is opened first, and the server holds all of them at once.
  std::vector<std::unique_ptr<StreamClient>> workers, garbage, stalled;
  for (int i = 0; i < kWorkers; ++i) workers.push_back(Dial(address_));
  for (int i = 0; i < kGarbage; ++i) garbage.push_back(Dial(address_));
  for (int i = 0; i < kStalled; ++i) stalled.push_back(Dial(address_));
  ASSERT_TRUE(testing::PollUntil([&] { return service_->data_port()->open_connections() == 256; },
                                 std::chrono::seconds(20)))
      << service_->data_port()->open_connections() << " connections open";

  // The hostile ones go first.
  for (int i = 0; i < kGarbage; ++i) {
    std::string bytes;
    // One header's bytes each, so that the server has read all there is when it closes.
    if (i % 2 == 0) {
      bytes = std::string(sizeof(ParamWireHeader), static_cast<char>('A' + i % 26));  // no magic at all
    } else {
      bytes = Request(ParamWireHeader::kPush, "", 1, 0, 16);
      reinterpret_cast<ParamWireHeader*>(bytes.data())->count = -5 - i;  // right magic, absurd count
    }
    ASSERT_TRUE(garbage[i]->Send({{bytes.data(), bytes.size()}}, In(5000)).ok());
  }
  std::vector<float> stall_payload(4096, 1.f);
  for (int i = 0; i < kStalled; ++i) {
    std::string bytes;
    switch (i % 3) {
      case 0:  // half a header
        bytes = Request(ParamWireHeader::kPush, "j-stall", 1, 0, 4096).substr(0, sizeof(ParamWireHeader) / 2);
        break;
      case 1: {  // a whole header and half the payload
        bytes = Request(ParamWireHeader::kPush, "j-stall", 1, 0, 4096, stall_payload.data());
        bytes.resize(bytes.size() - 2048 * sizeof(float));
        break;
      }
      default:  // a read of 20 MB, never read
        bytes = Request(ParamWireHeader::kRead, "j-unread", 0, 0, kN);
        break;
    }
    ASSERT_TRUE(stalled[i]->Send({{bytes.data(), bytes.size()}}, In(5000)).ok());
  }

  // The workers: write their slice, push its gradient for step 1 (the last push runs AdamW),
  // then read their slice and the next one back.
  std::barrier sync(kWorkers);
  std::vector<std::string> errors(kWorkers);
  std::vector<std::vector<float>> read(kWorkers, std::vector<float>(2 * kSlice));
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      const size_t b = w * kSlice;
      std::vector<float> p(kSlice), g(kSlice);
      for (size_t i = 0; i < kSlice; ++i) p[i] = Param(b + i), g[i] = Grad(b + i);
      auto wr = Call(*workers[w], Request(ParamWireHeader::kWrite, "j-good", 0, b, kSlice, p.data()));
      if (!wr.ok() || !wr->status.ok()) errors[w] = "write: " + (wr.ok() ? wr->status : wr.status()).ToString();
      sync.arrive_and_wait();
      auto push = Call(*workers[w], Request(ParamWireHeader::kPush, "j-good", 1, b, kSlice, g.data()));
      if (errors[w].empty() && (!push.ok() || !push->status.ok())) {
        errors[w] = "push: " + (push.ok() ? push->status : push.status()).ToString();
      }
      sync.arrive_and_wait();
      const size_t at = w + 1 < kWorkers ? b : b - kSlice;
      auto rd = Call(*workers[w], Request(ParamWireHeader::kRead, "j-good", 0, at, 2 * kSlice), read[w].data(), 2 * kSlice);
      if (errors[w].empty() && (!rd.ok() || !rd->status.ok() || rd->version != 1)) {
        errors[w] = "read: " + (rd.ok() ? rd->status.ToString() + " version " + std::to_string(rd->version)
                                        : rd.status().ToString());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < kWorkers; ++w) EXPECT_EQ(errors[w], "") << "worker " << w;

  // The twin job, stepped through gRPC with the same values.
  std::vector<float> p(kN), g(kN);
  for (size_t i = 0; i < kN; ++i) p[i] = Param(i), g[i] = Grad(i);
  for (size_t at = 0; at < kN; at += 1 << 20) {
    const size_t n = std::min<size_t>(1 << 20, kN - at);
    GrpcWrite("j-twin", at, std::vector<float>(p.begin() + at, p.begin() + at + n));
    GrpcPush("j-twin", 1, at, std::vector<float>(g.begin() + at, g.begin() + at + n));
  }
  const auto twin = GrpcRead("j-twin", 0, kN);
  ASSERT_EQ(twin.second, 1);
  const auto good = GrpcRead("j-good", 0, kN);
  EXPECT_EQ(good.second, 1) << "the 160 pushes made one step";
  EXPECT_TRUE(good.first == twin.first) << "the data port's job differs from its gRPC twin";
  for (int w = 0; w < kWorkers; ++w) {
    const size_t at = w + 1 < kWorkers ? w * kSlice : (w - 1) * kSlice;
    EXPECT_EQ(0, std::memcmp(read[w].data(), twin.first.data() + at, 2 * kSlice * sizeof(float))) << "worker " << w;
  }

  // The garbage was answered INVALID_ARGUMENT, naming what is wrong, then closed.
  for (int i = 0; i < kGarbage; ++i) {
    auto r = ReadReply(*garbage[i], nullptr, 0, 5000);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status.code(), absl::StatusCode::kInvalidArgument) << r->status;
    EXPECT_NE(r->status.message().find(i % 2 == 0 ? "magic" : "values"), std::string::npos) << r->status;
    EXPECT_TRUE(ClosedByServer(*garbage[i], 5000)) << "garbage connection " << i;
  }
  // The stalled ones were cut at their deadline (a second here, and a read's 20 MB at 16 MB/s),
  // and no other connection was. (Counted before their sockets are read: draining a stalled
  // read would let its reply finish.)
  EXPECT_TRUE(testing::PollUntil([&] { return service_->data_port()->deadlines_exceeded() >= kStalled; },
                                 std::chrono::seconds(20)));
  for (int i = 0; i < kStalled; ++i) EXPECT_TRUE(ClosedByServer(*stalled[i], 10000)) << "stalled connection " << i;
  EXPECT_EQ(service_->data_port()->deadlines_exceeded(), static_cast<uint64_t>(kStalled));
  // The stalled pushes left no trace: j-stall is still at step 0 and takes a whole push.
  auto c = Dial(address_);
  auto r = Call(*c, Request(ParamWireHeader::kPush, "j-stall", 1, 0, 4096, stall_payload.data()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok()) << r->status;
  EXPECT_EQ(r->version, 1);
}

// A read is sent straight from the range, all but its last chunk: values that change while it
// is under way (here a write through gRPC while the reader holds back, so the server's send is
// stuck in the socket) never arrive as a whole reply, mixed; the connection closes short of
// its end. A read of the values afterwards is whole, and has the written ones.
TEST_F(DataPortTest, AReadWhoseValuesChangeUnderItIsNeverDeliveredWhole) {
  StartServer({});
  constexpr size_t kN = size_t{16} << 20;  // 64 MB: far more than loopback's socket buffers
  InitRange("j-read", 0, kN);
  const std::vector<float> ones(1 << 20, 1.f), twos(1 << 20, 2.f);
  for (size_t at = 0; at < kN; at += ones.size()) GrpcWrite("j-read", static_cast<int64_t>(at), ones);

  auto c = Dial(address_);
  const std::string req = Request(ParamWireHeader::kRead, "j-read", 0, 0, kN);
  ASSERT_TRUE(c->Send({{req.data(), req.size()}}, In(20000)).ok());
  net::ParamWireReply r;
  ASSERT_TRUE(c->Receive(&r, sizeof(r), In(20000)).ok());
  ASSERT_EQ(r.code, 0);
  ASSERT_EQ(r.message_len, 0u);
  // The server is part-way through sending 64 MB that nobody reads yet: change the last
  // values, which it has not sent.
  GrpcWrite("j-read", static_cast<int64_t>(kN - twos.size()), twos);
  std::vector<float> got(kN);
  const absl::Status s = c->Receive(got.data(), kN * sizeof(float), In(20000));
  EXPECT_TRUE(absl::IsUnavailable(s)) << "a read whose values changed under it arrived whole: " << s;

  auto again = Dial(address_);
  auto whole = Call(*again, req, got.data(), kN);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(whole->status.ok()) << whole->status;
  EXPECT_EQ(got[0], 1.f);
  EXPECT_EQ(got[kN - 1], 2.f);
}

// A request stalled half-way is closed at its deadline, named as such; a connection idle
// between requests for longer is not, and serves its next request.
TEST_F(DataPortTest, ARequestStalledHalfWayIsCutAtItsDeadlineAnIdleConnectionIsNot) {
  net::StreamServer::Options options;
  options.message_timeout = std::chrono::milliseconds(300);
  StartServer(options);
  InitRange("j-000001", 0, 1024);
  auto idle = Dial(address_);
  auto stalled = Dial(address_);
  std::vector<float> g(1024, 0.5f);
  std::string bytes = Request(ParamWireHeader::kPush, "j-000001", 1, 0, 1024, g.data());
  bytes.resize(bytes.size() - 100);
  const auto t0 = Clock::now();
  ASSERT_TRUE(stalled->Send({{bytes.data(), bytes.size()}}, In(5000)).ok());
  ASSERT_TRUE(ClosedByServer(*stalled, 10000));
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  // The deadline is the timeout plus the payload's time at the minimum rate (4 KB: nothing).
  EXPECT_GE(waited, 0.29) << "closed before its deadline";
  EXPECT_EQ(service_->data_port()->deadlines_exceeded(), 1u);
  // Idle past the deadline (the stalled request's closing took longer): still served, and
  // the stalled push counted nothing: a whole push completes step 1.
  auto r = Call(*idle, Request(ParamWireHeader::kPush, "j-000001", 1, 0, 1024, g.data()));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok()) << r->status;
  EXPECT_EQ(r->version, 1);
}

// The server reads no request ahead of its reply: a 32 MB read whose reply is not read
// holds back the push sent behind it on the same connection (which would complete a step),
// until the reply has been read. And at max_connections it accepts no more until one closes.
TEST_F(DataPortTest, BackPressureNoReadAheadAndAConnectionLimit) {
  net::StreamServer::Options options;
  options.max_connections = 4;
  StartServer(options);
  constexpr size_t kN = 8 << 20;  // 32 MB: past what the sockets' buffers hold
  InitRange("j-big", 0, kN);
  InitRange("j-000001", 0, 1024);
  auto c = Dial(address_);
  std::vector<float> g(1024, 0.5f);
  std::string two = Request(ParamWireHeader::kRead, "j-big", 0, 0, kN);
  two += Request(ParamWireHeader::kPush, "j-000001", 1, 0, 1024, g.data());  // the whole range: a step
  ASSERT_TRUE(c->Send({{two.data(), two.size()}}, In(5000)).ok());
  // Three more connections make four; a fifth is not served (its request stays unanswered)
  // until one of the four closes.
  std::vector<std::unique_ptr<StreamClient>> more;
  for (int i = 0; i < 3; ++i) more.push_back(Dial(address_));
  ASSERT_TRUE(testing::PollUntil([&] { return service_->data_port()->open_connections() == 4; }, std::chrono::seconds(10)));
  auto fifth = Dial(address_);  // the kernel completes the handshake; the server does not accept
  const std::string probe = Request(ParamWireHeader::kRead, "j-000001", 0, 0, 16);
  ASSERT_TRUE(fifth->Send({{probe.data(), probe.size()}}, In(5000)).ok());
  net::ParamWireReply head;
  EXPECT_TRUE(absl::IsDeadlineExceeded(fifth->Receive(&head, sizeof(head), In(300))))
      << "a fifth connection was served at a limit of four";
  // Meanwhile (300 ms and more), the push behind the unread reply has not been read.
  EXPECT_EQ(GrpcRead("j-000001", 0, 16).second, 0) << "a request was read ahead of an unwritten reply";
  EXPECT_EQ(service_->data_port()->open_connections(), 4u);
  more.pop_back();  // one closes: the next in the backlog is accepted
  auto sixth = Dial(address_);
  std::vector<float> v(16);
  auto r = Call(*sixth, probe, v.data(), 16);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok()) << r->status;
  // Now the 32 MB reply is read, and only then the push behind it is answered.
  std::vector<float> all(kN);
  auto first = ReadReply(*c, all.data(), kN);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->status.ok()) << first->status;
  auto second = ReadReply(*c, nullptr, 0);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->status.ok()) << second->status;
  EXPECT_EQ(second->version, 1);
}

// Stop: the idle connection is closed at once, a request in progress finishes within the
// grace period (its reply is written), one that stays stalled is closed when the grace ends;
// then nothing listens.
TEST_F(DataPortTest, StopClosesIdleConnectionsAndLetsARequestInProgressFinish) {
  StartServer({});
  InitRange("j-000001", 0, 1024);
  auto idle = Dial(address_);
  auto finishing = Dial(address_);
  auto stuck = Dial(address_);
  std::vector<float> g(1024, 0.5f);
  const std::string push = Request(ParamWireHeader::kPush, "j-000001", 1, 0, 1024, g.data());
  const size_t half = push.size() / 2;
  ASSERT_TRUE(finishing->Send({{push.data(), half}}, In(5000)).ok());
  ASSERT_TRUE(stuck->Send({{push.data(), 20}}, In(5000)).ok());
  ASSERT_TRUE(testing::PollUntil([&] { return service_->data_port()->open_connections() == 3; }, std::chrono::seconds(10)));
  // Both partial requests have begun at the server before Stop: a connection in a message is
  // one whose first bytes it has seen. The idle connection's request is answered meanwhile.
  auto ping = Call(*idle, Request(ParamWireHeader::kRead, "j-000001", 0, 0, 0));
  ASSERT_TRUE(ping.ok()) << ping.status();
  auto stopped = std::async(std::launch::async, [&] { service_->StopDataPort(std::chrono::seconds(2)); });
  EXPECT_TRUE(ClosedByServer(*idle, 5000)) << "the idle connection is closed at once";
  ASSERT_TRUE(finishing->Send({{push.data() + half, push.size() - half}}, In(5000)).ok());
  auto r = ReadReply(*finishing, nullptr, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->status.ok()) << r->status;
  EXPECT_EQ(r->version, 1) << "the push finished during the grace period made its step";
  EXPECT_TRUE(ClosedByServer(*finishing, 5000));
  EXPECT_TRUE(ClosedByServer(*stuck, 10000)) << "the stalled request is closed when the grace ends";
  ASSERT_EQ(stopped.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(service_->data_port()->open_connections(), 0u);
  auto again = StreamClient::Connect(address_, In(5000));
  EXPECT_FALSE(again.ok()) << "the data port still listens after Stop";
}

#ifdef GANTRY_SHARDSERVER_BIN
// SIGTERM to gantry-shardserver with data port connections open (one idle, one half-way
// through a request): the daemon closes them and exits 0 within its grace period.
TEST(ShardServerSigtermTest, ExitsCleanlyWithDataPortConnectionsOpen) {
  char tmpl[] = "/tmp/gantry-sigterm-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, log = dir + "/log.txt";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string data_dir = "--data_dir=" + dir + "/data";
    if (!std::freopen(log.c_str(), "w", stderr)) ::_exit(127);
    ::execl(GANTRY_SHARDSERVER_BIN, GANTRY_SHARDSERVER_BIN, data_dir.c_str(), "--listen=127.0.0.1:0",
            "--metrics_listen=127.0.0.1:0", "--minloglevel=0", nullptr);  // its INFO lines, whatever GLOG_* says
    ::_exit(127);
  }
  // Its log names the data port once it serves.
  std::string address;
  const bool up = testing::PollUntil(
      [&] {
        std::ifstream in(log);
        std::stringstream ss;
        ss << in.rdbuf();
        const std::string text = ss.str();
        const std::string key = "parameter-server data port on ";
        const size_t at = text.find(key);
        if (at == std::string::npos) return false;
        address = text.substr(at + key.size(), text.find('\n', at) - at - key.size());
        return true;
      },
      std::chrono::seconds(30));
  if (!up) ::kill(pid, SIGKILL);
  ASSERT_TRUE(up) << "no data port in the log";
  auto idle = Dial(address);
  auto busy = Dial(address);
  const std::string half = Request(ParamWireHeader::kPush, "j-000001", 1, 0, 1024).substr(0, 30);
  ASSERT_TRUE(busy->Send({{half.data(), half.size()}}, In(5000)).ok());
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  EXPECT_TRUE(ClosedByServer(*idle, 10000));
  int status = 0;
  const bool exited = testing::PollUntil([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, std::chrono::seconds(20));
  if (!exited) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  ASSERT_TRUE(exited) << "gantry-shardserver did not exit on SIGTERM";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_TRUE(ClosedByServer(*busy, 1000));
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find("data port stopped"), std::string::npos) << ss.str();
  std::filesystem::remove_all(dir);
}
#endif

}  // namespace
}  // namespace gantry::shardserver
