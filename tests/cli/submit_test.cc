// gantry submit (cli/jobs.cc) against a stand-in coordinator on loopback that counts its
// SubmitJob calls: an invalid spec is refused before any call, with the coordinator's error
// (INVALID_ARGUMENT naming the field) and its exit status; a valid one goes as written.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "gantry/v1/coordinator.grpc.pb.h"
#include "jobspec/job_spec.h"
#include "tests/test_util.h"

namespace gantry::cli {

// The command table (the gantry binary's is in main.cc): submit alone.
const std::vector<Command> kCommands = {{"submit", "FILE", "queue the job spec in FILE, print its id", SubmitCommand}};

namespace {

class CountingCoordinator : public v1::Coordinator::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest* req, v1::SubmitJobResponse* resp) override {
    ++calls;
    received = req->spec_yaml();
    resp->set_job_id("j-000001");
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};
  std::string received;
};

class SubmitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&coordinator_);
    server_ = b.BuildAndStart();
    ASSERT_NE(port, 0);
    options_.coordinator = absl::StrCat("127.0.0.1:", port);
    options_.command = "submit";
  }
  void TearDown() override { server_->Shutdown(); }
  // Runs `gantry submit FILE` with `text` in FILE: the exit status, with what it printed.
  int Submit(const std::string& text, std::string* out, std::string* err) {
    const std::string file = dir_.File("job.yaml");
    std::ofstream(file) << text;
    options_.args = {file};
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    const int rc = SubmitCommand(options_);
    *out = ::testing::internal::GetCapturedStdout();
    *err = ::testing::internal::GetCapturedStderr();
    return rc;
  }
  testing::TempDir dir_;
  CountingCoordinator coordinator_;
  std::unique_ptr<grpc::Server> server_;
  Options options_;
};

constexpr char kSpec[] =
    "model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 16}\ndata: {train: /data/train.bin}\n";

TEST_F(SubmitTest, AnInvalidSpecIsRefusedBeforeAnyCallNamingTheField) {
  std::string out, err;
  const std::string bad = std::string(kSpec) + "train: {steps: 10, micro_batch: 2, lr: 1.0e-3, lrr: 2}\n";
  EXPECT_EQ(Submit(bad, &out, &err), 2) << err;
  EXPECT_EQ(coordinator_.calls.load(), 0) << "refused here, not sent";
  // The coordinator's own words for it (SubmitJob returns ParseJobSpec's error), as gantry
  // prints a refusal of the coordinator's.
  const auto parsed = jobspec::ParseJobSpec(bad);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(err, absl::StrCat("gantry: INVALID_ARGUMENT: ", parsed.status().message(), "\n"));
  EXPECT_NE(err.find("unknown field 'train.lrr'"), std::string::npos) << err;
  EXPECT_TRUE(out.empty()) << out;
  // A rule across fields, as well: the coordinator's validation, not only its parser's.
  EXPECT_EQ(Submit(std::string(kSpec) + "train: {steps: 10, micro_batch: 2, lr: 1.0e-3}\nparallel: {dp: 3}\n"
                   "elastic: {min_dp: 1, max_dp: 2}\n", &out, &err), 2);
  EXPECT_NE(err.find("field 'parallel.dp' must be within [elastic.min_dp, elastic.max_dp] = [1, 2], not 3"),
            std::string::npos)
      << err;
  EXPECT_EQ(coordinator_.calls.load(), 0);
}

TEST_F(SubmitTest, AValidSpecIsSentAsWritten) {
  std::string out, err;
  const std::string text = std::string("# as written, comments and all\n") + kSpec +
                           "train: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n";
  EXPECT_EQ(Submit(text, &out, &err), 0) << err;
  EXPECT_EQ(coordinator_.calls.load(), 1);
  EXPECT_EQ(coordinator_.received, text);
  EXPECT_EQ(out, "j-000001\n");
}

}  // namespace
}  // namespace gantry::cli
