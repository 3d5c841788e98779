// The RPC edge (common/rpc_edge.h) on a real server over loopback: every call's real
// latency and code per method, unary and streaming, from the interceptor; a handler's
// absl::Status reaching the client as the same code and message; a server fault logged
// with the method and the peer; the health service answering and left out of the metrics;
// the caller's Principal reaching the handler, and a call that names no identity refused
// (UNAUTHENTICATED, logged) without its token in the reply or the log.
#include "common/rpc_edge.h"

#include <glog/logging.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "common/principals.h"
#include "common/security.h"
#include "gantry/v1/shardserver.grpc.pb.h"
#include "tests/test_util.h"

namespace gantry {
namespace {

using Clock = std::chrono::steady_clock;

// Work that takes at least `d` (the handler's own time, which the edge must record).
void Spend(std::chrono::milliseconds d) {
  const auto end = Clock::now() + d;
  while (Clock::now() < end) {
  }
}
constexpr std::chrono::milliseconds kWork(30);

// A service whose handlers go through the edge helpers: Commit takes kWork and fails for
// the job "missing"; a WriteChunks stream takes kWork at its end.
class TestService final : public v1::ShardServer::CallbackService {
 public:
  grpc::ServerUnaryReactor* Commit(grpc::CallbackServerContext* ctx, const v1::CommitRequest* req,
                                   v1::CommitResponse*) override {
    return ServeUnary(ctx, [&](const Principal& who) -> absl::Status {  // the body that takes the caller
      {
        std::lock_guard<std::mutex> l(mu_);
        callers_.push_back(who.name + " via " + who.via);
      }
      if (req->job_id() == "whoami") return absl::OkStatus();
      Spend(kWork);
      if (req->job_id() == "missing") return absl::NotFoundError("job missing has no parts here");
      if (req->job_id() == "broken") return absl::DataLossError("chunk 3 of part-00000 fails its crc32c");
      return absl::OkStatus();
    });
  }
  grpc::ServerReadReactor<v1::Chunk>* WriteChunks(grpc::CallbackServerContext* ctx,
                                                  v1::WriteChunksResponse* resp) override {
    class Reader : public grpc::ServerReadReactor<v1::Chunk> {
     public:
      explicit Reader(v1::WriteChunksResponse* resp) : resp_(resp) { StartRead(&chunk_); }
      void OnReadDone(bool ok) override {
        if (ok) {
          resp_->set_bytes(resp_->bytes() + static_cast<int64_t>(chunk_.data().size()));
          StartRead(&chunk_);
          return;
        }
        Spend(kWork);
        Finish(grpc::Status::OK);
      }
      void OnDone() override { delete this; }

     private:
      v1::WriteChunksResponse* resp_;
      v1::Chunk chunk_;
    };
    return ServeStream<grpc::ServerReadReactor<v1::Chunk>>(ctx, [&] { return new Reader(resp); });
  }
  std::vector<std::string> callers() {
    std::lock_guard<std::mutex> l(mu_);
    return callers_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> callers_;  // each Commit's caller: "NAME via HOW"
};

class RpcEdgeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&service_);
    AddRpcEdge(b, &registry_, "edgetest");
    server_ = b.BuildAndStart();
    ASSERT_NE(port, 0);
    address_ = "127.0.0.1:" + std::to_string(port);
    channel_ = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
  }
  void TearDown() override { server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5)); }
  prometheus::ClientMetric::Histogram Latency(const std::string& method) {
    return registry_
        .GetHistogram("gantry_edgetest_rpc_seconds", "RPC handling time, by method.", metrics::ExponentialBuckets(1e-4, 4, 10),
                      {{"method", method}})
        .Collect()
        .histogram;
  }

  TestService service_;
  metrics::Registry registry_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(RpcEdgeTest, EveryCallIsRecordedWithItsRealLatencyAndCode) {
  auto stub = v1::ShardServer::NewStub(channel_);
  v1::CommitRequest req;
  v1::CommitResponse resp;
  req.set_job_id("j-1");
  ASSERT_TRUE(stub->Commit(ContextWithDeadline(30).get(), req, &resp).ok());
  req.set_job_id("missing");
  const grpc::Status refused = stub->Commit(ContextWithDeadline(30).get(), req, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::NOT_FOUND) << "the handler's absl code, unchanged";
  EXPECT_EQ(refused.error_message(), "job missing has no parts here");

  const auto commit = Latency("Commit");
  EXPECT_EQ(commit.sample_count, 2u);
  EXPECT_GE(commit.sample_sum, 2 * 0.030) << "each call took its handler's 30 ms at least";
  const std::string text = registry_.Render();
  EXPECT_NE(text.find("gantry_edgetest_rpcs_total{code=\"OK\",method=\"Commit\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("gantry_edgetest_rpcs_total{code=\"NOT_FOUND\",method=\"Commit\"} 1\n"), std::string::npos) << text;

  // A client stream: from its arrival to its status, the handler's time at the end included.
  auto ctx = ContextWithDeadline(30);
  v1::WriteChunksResponse wr;
  auto writer = stub->WriteChunks(ctx.get(), &wr);
  v1::Chunk c;
  c.set_data(std::string(1000, 'x'));
  ASSERT_TRUE(writer->Write(c));
  ASSERT_TRUE(writer->Write(c));
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  EXPECT_EQ(wr.bytes(), 2000);
  const auto stream = Latency("WriteChunks");
  EXPECT_EQ(stream.sample_count, 1u);
  EXPECT_GE(stream.sample_sum, 0.030);
  EXPECT_NE(registry_.Render().find("gantry_edgetest_rpcs_total{code=\"OK\",method=\"WriteChunks\"} 1\n"),
            std::string::npos);
}

TEST_F(RpcEdgeTest, TheHealthServiceAnswersAndIsNotRecorded) {
  auto serving = CheckServing(address_);
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  EXPECT_EQ(registry_.Render().find("method=\"Check\""), std::string::npos) << registry_.Render();
}

// Keeps the warnings logged while it lives.
class WarningLog : public google::LogSink {
 public:
  WarningLog() { google::AddLogSink(this); }
  ~WarningLog() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*, const char* message,
            size_t length) override {
    if (severity != google::GLOG_WARNING) return;
    std::lock_guard<std::mutex> l(mu_);
    lines_.emplace_back(message, length);
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> l(mu_);
    return lines_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST_F(RpcEdgeTest, AServerFaultIsLoggedWithItsMethodAndPeer) {
  WarningLog log;
  auto stub = v1::ShardServer::NewStub(channel_);
  v1::CommitRequest req;
  v1::CommitResponse resp;
  req.set_job_id("broken");
  EXPECT_EQ(stub->Commit(ContextWithDeadline(30).get(), req, &resp).error_code(), grpc::StatusCode::DATA_LOSS);
  req.set_job_id("missing");
  EXPECT_EQ(stub->Commit(ContextWithDeadline(30).get(), req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 1u) << "DATA_LOSS is a warning; NOT_FOUND (the caller's error) is not";
  EXPECT_NE(lines[0].find("/gantry.v1.ShardServer/Commit from ipv4:127.0.0.1:"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("DATA_LOSS: chunk 3 of part-00000 fails its crc32c"), std::string::npos) << lines[0];
}

// A call with "authorization: Bearer TOKEN" (gRPC sends call credentials only over TLS; the
// edge reads the same header).
std::unique_ptr<grpc::ClientContext> WithToken(const std::string& token) {
  auto ctx = ContextWithDeadline(30);
  if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
  return ctx;
}

TEST_F(RpcEdgeTest, TheCallersPrincipalReachesTheHandler) {
  auto stub = v1::ShardServer::NewStub(channel_);
  v1::CommitRequest req;
  v1::CommitResponse resp;
  req.set_job_id("whoami");
  ASSERT_TRUE(stub->Commit(WithToken("").get(), req, &resp).ok());
  ASSERT_TRUE(stub->Commit(WithToken("anything").get(), req, &resp).ok()) << "nothing configured: no checks";

  testing::TempDir dir;
  const std::string token = "alice-7d2f19c4e8a05b36";
  ASSERT_TRUE(WriteFileAtomic(dir.File("p.yaml"), "users:\n  - {name: alice, team: vision, role: user, token_sha256: " +
                                                      Sha256Hex(token) + "}\n")
                  .ok());
  auto file = PrincipalsFile::Load(dir.File("p.yaml"));
  ASSERT_TRUE(file.ok()) << file.status();
  SetProcessPrincipals(file->get());
  struct Unset {  // however the test ends: no later test sees this file
    ~Unset() { SetProcessPrincipals(nullptr); }
  } unset;
  WarningLog log;
  ASSERT_TRUE(stub->Commit(WithToken(token).get(), req, &resp).ok());
  const std::string wrong = "alice-7d2f19c4e8a05b37";
  const grpc::Status refused = stub->Commit(WithToken(wrong).get(), req, &resp);
  const grpc::Status none = stub->Commit(WithToken("").get(), req, &resp);
  // A stream whose handler takes no principal is refused at the edge too.
  auto ctx = WithToken(wrong);
  v1::WriteChunksResponse wr;
  auto writer = stub->WriteChunks(ctx.get(), &wr);
  writer->WritesDone();
  const grpc::Status stream = writer->Finish();

  EXPECT_EQ(service_.callers(),
            (std::vector<std::string>{"anonymous via none", "anonymous via none", "alice via token"}))
      << "refused calls never reach the handler";
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(refused.error_message(), "unknown token: no identity of this cluster has it (revoked, mistyped, or another cluster's)");
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(none.error_message().find("this call names no identity"), std::string::npos) << none.error_message();
  EXPECT_EQ(stream.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const auto lines = log.lines();
  ASSERT_EQ(lines.size(), 3u) << "each refusal is a warning";
  for (const auto& line : lines) {
    EXPECT_NE(line.find("UNAUTHENTICATED"), std::string::npos) << line;
    EXPECT_EQ(line.find(wrong), std::string::npos) << "a token was logged: " << line;
    EXPECT_EQ(line.find(token), std::string::npos) << "a token was logged: " << line;
  }
}

}  // namespace
}  // namespace gantry
