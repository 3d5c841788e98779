// The coordinator with a principals file (common/principals.h), in process over loopback:
// WhoAmI answers each caller's identity (a user's token, a worker's, the laptop's nobody); an
// unknown token is refused, UNAUTHENTICATED, on every method, with the token in neither the
// reply nor the log; after the file is rewritten and reloaded (PrincipalsFile::Reload, what
// the daemon's SIGHUP calls) a revoked token is refused, a new one accepted, and the queued
// job is untouched; a reload of a bad file leaves the previous one in force.
#include <glog/logging.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/principals.h"
#include "common/rpc_edge.h"
#include "common/security.h"
#include "coordinator/cluster.h"
#include "coordinator/service.h"
#include "coordinator/store.h"
#include "tests/coordinator/cluster_test_util.h"
#include "tests/test_util.h"

namespace gantry::coordinator {
namespace {

constexpr char kAlice[] = "alice-5e1b07c3a9f24d68";
constexpr char kBob[] = "bob-c41d8e2f906a7b35";
constexpr char kPool[] = "pool-2a7f4c9e1b08d356";

// Keeps every line logged while it lives.
class LogCapture : public google::LogSink {
 public:
  LogCapture() { google::AddLogSink(this); }
  ~LogCapture() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity, const char*, const char*, int, const struct ::tm*, const char* message,
            size_t length) override {
    std::lock_guard<std::mutex> l(mu_);
    text_.append(message, length).append("\n");
  }
  std::string text() {
    std::lock_guard<std::mutex> l(mu_);
    return text_;
  }

 private:
  std::mutex mu_;
  std::string text_;
};

std::string UserEntry(const std::string& name, const std::string& team, const std::string& role,
                      const std::string& token) {
  return absl::StrCat("  - name: ", name, "\n", team.empty() ? "" : absl::StrCat("    team: ", team, "\n"),
                      "    role: ", role, "\n    token_sha256: ", Sha256Hex(token), "\n");
}

// The service with the RPC edge's interceptor, whose refusal warnings are in the log checked.
class WhoAmITest : public ::testing::Test, protected ServedCoordinator {
 protected:
  void SetUp() override { StartServer(dir_.File("db")); }
  void TearDown() override {
    SetProcessPrincipals(nullptr);
    StopServer();
  }
  void WriteFile(const std::string& text) { ASSERT_TRUE(WriteFileAtomic(path_, text).ok()); }
  void Serve(const std::string& text) {
    WriteFile(text);
    auto f = PrincipalsFile::Load(path_);
    ASSERT_TRUE(f.ok()) << f.status();
    file_ = *std::move(f);
    SetProcessPrincipals(file_.get());
  }
  // "authorization: Bearer TOKEN", as gRPC's call credentials send it (only over TLS, so the
  // test sets the header itself on its plaintext loopback channel).
  static std::unique_ptr<grpc::ClientContext> As(const std::string& token) {
    auto ctx = ContextWithDeadline(30);
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }
  grpc::Status WhoAmI(const std::string& token, v1::WhoAmIResponse* resp) {
    return stub_->WhoAmI(As(token).get(), v1::WhoAmIRequest(), resp);
  }

  testing::TempDir dir_;
  const std::string path_ = dir_.File("principals.yaml");
  std::unique_ptr<PrincipalsFile> file_;
};

// alice (user, team vision), bob (admin), the worker identity gpu-pool-a.
std::string Principals() {
  return absl::StrCat("users:\n", UserEntry("alice", "vision", "user", kAlice), UserEntry("bob", "", "admin", kBob),
                      "services:\n  - name: gpu-pool-a\n    kind: worker\n    token_sha256: ", Sha256Hex(kPool), "\n");
}

TEST_F(WhoAmITest, NothingConfiguredIsALaptopClusterWithNoChecks) {
  v1::WhoAmIResponse r;
  ASSERT_TRUE(WhoAmI("", &r).ok());
  EXPECT_EQ(r.name(), "anonymous");
  EXPECT_EQ(r.kind(), "user");
  EXPECT_EQ(r.role(), "admin");
  EXPECT_EQ(r.authenticated_by(), "none");
  ASSERT_TRUE(WhoAmI("any-token", &r).ok());
  EXPECT_EQ(r.name(), "anonymous");
}

TEST_F(WhoAmITest, EachTokenIsAnsweredWithItsIdentity) {
  Serve(Principals());
  v1::WhoAmIResponse r;
  ASSERT_TRUE(WhoAmI(kAlice, &r).ok());
  EXPECT_EQ(r.name(), "alice");
  EXPECT_EQ(r.kind(), "user");
  EXPECT_EQ(r.team(), "vision");
  EXPECT_EQ(r.role(), "user");
  EXPECT_EQ(r.authenticated_by(), "token");
  ASSERT_TRUE(WhoAmI(kBob, &r).ok());
  EXPECT_EQ(r.name(), "bob");
  EXPECT_EQ(r.team(), "");
  EXPECT_EQ(r.role(), "admin");
  ASSERT_TRUE(WhoAmI(kPool, &r).ok());
  EXPECT_EQ(r.name(), "gpu-pool-a");
  EXPECT_EQ(r.kind(), "worker");
  EXPECT_EQ(r.role(), "");
}

TEST_F(WhoAmITest, AnUnknownTokenIsRefusedOnEveryMethodAndNeverShown) {
  Serve(Principals());
  const std::string wrong = "alice-5e1b07c3a9f24d69";
  LogCapture log;
  v1::WhoAmIResponse r;
  const grpc::Status who = WhoAmI(wrong, &r);
  EXPECT_EQ(who.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(who.error_message(), "unknown token: no identity of this cluster has it (revoked, mistyped, or another cluster's)");
  v1::ListJobsResponse jobs;
  const grpc::Status list = stub_->ListJobs(As(wrong).get(), v1::ListJobsRequest(), &jobs);
  EXPECT_EQ(list.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "ServeSlow's methods too";
  const grpc::Status none = stub_->ListJobs(As("").get(), v1::ListJobsRequest(), &jobs);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(none.error_message().find("names no identity"), std::string::npos) << none.error_message();
  // A stream (WatchJob): refused at the edge as well.
  v1::WatchJobRequest wreq;
  wreq.set_job_id("j-000001");
  auto wctx = As(wrong);
  auto reader = stub_->WatchJob(wctx.get(), wreq);
  v1::JobEvent ev;
  EXPECT_FALSE(reader->Read(&ev));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(stub_->ListJobs(As(kAlice).get(), v1::ListJobsRequest(), &jobs).ok()) << "a known token passes";
  EXPECT_NE(log.text().find("/gantry.v1.Coordinator/WhoAmI from ipv4:127.0.0.1:"), std::string::npos)
      << "the refusal is logged, naming the peer:\n" << log.text();
  for (const std::string& secret : {wrong, std::string(kAlice), Sha256Hex(wrong)}) {
    EXPECT_EQ(who.error_message().find(secret), std::string::npos);
    EXPECT_EQ(log.text().find(secret), std::string::npos) << "logged:\n" << log.text();
  }
}

TEST_F(WhoAmITest, AfterAReloadARevokedTokenIsRefusedAndJobsAreUntouched) {
  Serve(Principals());
  v1::SubmitJobRequest submit;
  submit.set_spec_yaml(
      "name: tiny\nmodel: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 16}\n"
      "data: {train: /nonexistent/train.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n");
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(stub_->SubmitJob(As(kAlice).get(), submit, &submitted).ok());
  v1::WhoAmIResponse r;
  ASSERT_TRUE(WhoAmI(kAlice, &r).ok());

  // alice revoked, carol added: the file rewritten, then what SIGHUP calls.
  WriteFile(absl::StrCat("users:\n", UserEntry("bob", "", "admin", kBob), UserEntry("carol", "nlp", "viewer", "carol-t"),
                         "services:\n  - name: gpu-pool-a\n    kind: worker\n    token_sha256: ", Sha256Hex(kPool), "\n"));
  ASSERT_TRUE(file_->Reload().ok());
  const grpc::Status revoked = WhoAmI(kAlice, &r);
  EXPECT_EQ(revoked.error_code(), grpc::StatusCode::UNAUTHENTICATED) << "alice's token is refused from now on";
  v1::ListJobsResponse jobs;
  EXPECT_EQ(stub_->ListJobs(As(kAlice).get(), v1::ListJobsRequest(), &jobs).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  ASSERT_TRUE(WhoAmI("carol-t", &r).ok());
  EXPECT_EQ(r.name(), "carol");
  EXPECT_EQ(r.role(), "viewer");
  ASSERT_TRUE(WhoAmI(kBob, &r).ok());
  EXPECT_EQ(r.name(), "bob");

  // The job queued before the reload is there, as it was.
  v1::GetJobRequest get;
  get.set_job_id(submitted.job_id());
  v1::Job job;
  ASSERT_TRUE(stub_->GetJob(As(kBob).get(), get, &job).ok());
  EXPECT_EQ(job.state(), v1::PENDING);

  // A bad file: the reload fails, is logged, and the file before it stays in force.
  LogCapture log;
  WriteFile(absl::StrCat("users:\n", UserEntry("bob", "", "superuser", kBob)));
  const absl::Status bad = file_->Reload();
  EXPECT_EQ(bad.message(), path_ + ":3: users[0].role: unknown role 'superuser' (admin, user, viewer)");
  EXPECT_NE(log.text().find(std::string(bad.message())), std::string::npos) << log.text();
  ASSERT_TRUE(WhoAmI("carol-t", &r).ok()) << "the previous file is still in force";
  EXPECT_EQ(WhoAmI(kAlice, &r).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace gantry::coordinator
