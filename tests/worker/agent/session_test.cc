// The worker agent's Session (worker/agent/session.h) over a real attach stream: an
// in-process fake coordinator on a loopback port 0 records what the worker sends on its
// Attach stream and serves the rendezvous store a job of two ranks meets through; the test
// hands each assignment to Session::Run as the agent's read loop does (worker/agent/agent.cc).
#include "worker/agent/session.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/token_file.h"
#include "nlohmann/json.hpp"
#include "shardserver/client/shard_client.h"
#include "shardserver/service.h"
#include "tests/test_util.h"

namespace gantry::agent {
namespace {

using Clock = std::chrono::steady_clock;
using Messages = std::vector<v1::WorkerMessage>;
using std::chrono::seconds;

// The coordinator's side of Attach (every worker message, in arrival order) and its
// rendezvous store (RendezvousGet waits up to wait_ms for the key).
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  FakeCoordinator() {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
  }
  ~FakeCoordinator() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + seconds(5));
  }
  bool started() const { return server_ != nullptr && port_ > 0; }
  std::shared_ptr<v1::Coordinator::Stub> stub() const { return stub_; }

  grpc::Status Attach(grpc::ServerContext*,
                      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override {
    v1::WorkerMessage m;
    while (stream->Read(&m)) {
      std::lock_guard<std::mutex> l(mu_);
      got_.push_back(m);
      cv_.notify_all();
    }
    return grpc::Status::OK;
  }
  grpc::Status RendezvousPut(grpc::ServerContext*, const v1::RendezvousPutRequest* req,
                             v1::RendezvousPutResponse*) override {
    std::lock_guard<std::mutex> l(mu_);
    store_[absl::StrCat(req->job_id(), "/", req->generation(), "/", req->key())] = req->value();
    cv_.notify_all();
    return grpc::Status::OK;
  }
  grpc::Status RendezvousGet(grpc::ServerContext*, const v1::RendezvousGetRequest* req,
                             v1::RendezvousGetResponse* resp) override {
    const std::string k = absl::StrCat(req->job_id(), "/", req->generation(), "/", req->key());
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_until(l, Clock::now() + std::chrono::milliseconds(req->wait_ms()),
                   [&] { return closing_ || store_.count(k) > 0; });
    auto it = store_.find(k);
    if (it == store_.end()) return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "no key " + req->key());
    resp->set_value(it->second);
    return grpc::Status::OK;
  }

  // Whether the messages received satisfy `holds` within `limit`.
  bool WaitFor(const std::function<bool(const Messages&)>& holds, seconds limit) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_until(l, Clock::now() + limit, [&] { return holds(got_); });
  }
  Messages messages() {
    std::lock_guard<std::mutex> l(mu_);
    return got_;
  }

 private:
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<v1::Coordinator::Stub> stub_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closing_ = false;
  Messages got_;
  std::map<std::string, std::string> store_;
};

// The step reports of one placement, in order.
std::vector<int64_t> Steps(const Messages& ms, const std::string& job, int64_t gen) {
  std::vector<int64_t> steps;
  for (const auto& m : ms) {
    if (m.has_step() && m.step().job_id() == job && m.step().generation() == gen) steps.push_back(m.step().report().step());
  }
  return steps;
}
std::optional<v1::JobDone> DoneOf(const Messages& ms, const std::string& job, int64_t gen, int rank = 0) {
  for (const auto& m : ms) {
    if (m.has_done() && m.done().job_id() == job && m.done().generation() == gen && m.done().rank() == rank) return m.done();
  }
  return std::nullopt;
}
auto HasDone(const std::string& job, int64_t gen, int rank = 0) {
  return [=](const Messages& ms) { return DoneOf(ms, job, gen, rank).has_value(); };
}

v1::Assignment Assign(const std::string& job, int64_t gen, const std::string& spec, int rank = 0, int world = 1) {
  v1::Assignment a;
  a.set_job_id(job);
  a.set_generation(gen);
  a.set_spec_yaml(spec);
  a.set_rank(rank);
  a.set_world_size(world);
  // The layout a coordinator places a spec's ranks in: its own, at dp `world`.
  auto parsed = jobspec::ParseJobSpec(spec);
  const jobspec::PlacedLayout own = parsed.ok() ? jobspec::LayoutOf(*parsed) : jobspec::PlacedLayout{};
  v1::Layout* l = a.mutable_layout();
  l->set_dp(world), l->set_tp(own.tp), l->set_pp(own.pp), l->set_cp(own.cp);
  l->set_virtual_stages(own.virtual_stages), l->set_zero_stage(own.zero_stage);
  l->set_sequence_parallel(own.sequence_parallel), l->set_micro_batch(own.micro_batch);
  l->set_recompute(own.recompute);
  a.set_local_rank(0);
  a.set_local_world(1);
  return a;
}

// A worker's attach session: its stream to the fake coordinator and the Session over it.
struct Worker {
  Worker(FakeCoordinator& c, const std::string& work_dir) {
    options.work_dir = work_dir;
    options.threads = 1;
    stream = c.stub()->Attach(&ctx);
    session = std::make_unique<Session>(options, stream.get(), &registry, c.stub(), &stop);
  }
  ~Worker() {
    session.reset();
    stream->WritesDone();
    (void)stream->Finish();
  }
  WorkerOptions options;
  std::atomic<bool> stop{false};
  metrics::Registry registry;
  grpc::ClientContext ctx;
  std::unique_ptr<AttachStream> stream;
  std::unique_ptr<Session> session;
  double JobInfo(const std::string& job) {
    return registry.GetGauge("gantry_worker_job_info", "1 for the job and rank this worker runs now.",
                             {{"job", job}, {"rank", "0"}}).Value();
  }
};

// Session::Run on a thread of its own; stopped (if it still runs) and joined at the end.
struct Running {
  Running(Worker& w, v1::Assignment a) : w(w), t([&w, a] { w.session->Run(a); }) {}
  ~Running() {
    w.stop = true;
    w.session->Abort();
    Join();
  }
  void Join() {
    if (t.joinable()) t.join();
  }
  Worker& w;
  std::thread t;
};

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(coord_.started());
    ASSERT_TRUE(data::WriteTokenFile(dir_.File("train.bin"), testing::PatternedTokens(20000, 5)).ok());
  }
  std::string Spec(int64_t steps, const std::string& extra = "", const std::string& train = "") const {
    return "model: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 31, seq_len: 16}\n"
           "data: {train: " + (train.empty() ? dir_.File("train.bin") : train) + "}\n"
           "train: {steps: " + std::to_string(steps) + ", micro_batch: 2, global_batch: 4, lr: 1.0e-2, warmup: 1, seed: 3}\n" +
           extra;
  }
  testing::TempDir dir_;
  FakeCoordinator coord_;
};

TEST_F(SessionTest, ATinyJobRunsToItsEndReportingEveryStepThenAnOkJobDone) {
  Worker w(coord_, dir_.File("work"));
  w.session->Run(Assign("j-1", 2, Spec(5)));
  ASSERT_TRUE(coord_.WaitFor(HasDone("j-1", 2), seconds(30)));
  const Messages ms = coord_.messages();
  EXPECT_EQ(Steps(ms, "j-1", 2), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  for (const auto& m : ms) {
    if (!m.has_step()) continue;
    EXPECT_EQ(m.step().rank(), 0);
    const v1::StepReport& r = m.step().report();
    EXPECT_TRUE(std::isfinite(r.loss()) && r.loss() > 0) << "step " << r.step() << " loss " << r.loss();
    EXPECT_GT(r.step_seconds(), 0) << "step " << r.step();
    EXPECT_GT(r.tokens_per_second(), 0) << "step " << r.step();
    EXPECT_TRUE(std::isnan(r.val_loss())) << "no validation data, yet step " << r.step() << " has " << r.val_loss();
  }
  const v1::JobDone d = *DoneOf(ms, "j-1", 2);
  EXPECT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(d.code(), 0);
  EXPECT_EQ(d.error(), "");
  EXPECT_EQ(d.unreachable_shard_servers_size(), 0);
  EXPECT_TRUE(ms.back().has_done()) << "a message after the JobDone: " << ms.back().ShortDebugString();
  // Nothing runs any more: a heartbeat names no job.
  v1::Heartbeat hb;
  w.session->FillHeartbeat(&hb);
  EXPECT_EQ(hb.job_id(), "");
  EXPECT_EQ(hb.ranks_size(), 0);
  EXPECT_EQ(w.registry.GetCounter("gantry_worker_steps_total", "Training steps done.").Value(), 5);
  EXPECT_EQ(w.JobInfo("j-1"), 0);
}

TEST_F(SessionTest, ABadAssignmentEndsInAJobDoneNamingWhatIsWrongAndTheSessionRunsTheNext) {
  // A shard server's address that refuses connections: a port bound here, never listened on.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string dead = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));

  struct Case {
    v1::Assignment a;
    absl::StatusCode code;
    std::string says;
  };
  std::vector<Case> cases;
  cases.push_back({Assign("j-spec", 1, Spec(0)), absl::StatusCode::kInvalidArgument, "train.steps"});
  cases.push_back({Assign("j-data", 1, Spec(3, "", dir_.File("missing.bin"))), absl::StatusCode::kNotFound,
                   dir_.File("missing.bin")});
  v1::Assignment resume = Assign("j-resume", 1, Spec(3));
  resume.set_resume_step(7);
  resume.set_resume_job_id("j-old");
  cases.push_back({resume, absl::StatusCode::kNotFound,
                   "checkpoint.resume_from: job j-old has no committed checkpoint of step 7"});
  v1::Assignment unreachable = Assign("j-unreach", 1, Spec(3));
  unreachable.set_resume_step(2);
  unreachable.set_resume_job_id("j-unreach");
  unreachable.add_shard_servers(dead);
  cases.push_back({unreachable, absl::StatusCode::kUnavailable, "shard server " + dead});

  Worker w(coord_, dir_.File("work"));
  for (const Case& c : cases) {
    const std::string& job = c.a.job_id();
    SCOPED_TRACE(job);
    w.session->Run(c.a);
    ASSERT_TRUE(coord_.WaitFor(HasDone(job, 1), seconds(30)));
    const Messages ms = coord_.messages();
    const v1::JobDone d = *DoneOf(ms, job, 1);
    EXPECT_FALSE(d.ok());
    EXPECT_EQ(d.code(), static_cast<int>(c.code)) << d.error();
    EXPECT_NE(d.error().find(c.says), std::string::npos) << d.error();
    EXPECT_TRUE(Steps(ms, job, 1).empty());
    if (job == "j-unreach") {
      // Named for the coordinator to count out.
      ASSERT_EQ(d.unreachable_shard_servers_size(), 1);
      EXPECT_EQ(d.unreachable_shard_servers(0), dead);
    } else {
      EXPECT_EQ(d.unreachable_shard_servers_size(), 0);
    }
    v1::Heartbeat hb;
    w.session->FillHeartbeat(&hb);
    EXPECT_EQ(hb.job_id(), "");
  }
  ::close(fd);
  // The same session runs a good assignment after them.
  w.session->Run(Assign("j-good", 1, Spec(2)));
  ASSERT_TRUE(coord_.WaitFor(HasDone("j-good", 1), seconds(30)));
  const Messages ms = coord_.messages();
  EXPECT_TRUE(DoneOf(ms, "j-good", 1)->ok()) << DoneOf(ms, "j-good", 1)->error();
  EXPECT_EQ(Steps(ms, "j-good", 1), (std::vector<int64_t>{1, 2}));
}

TEST_F(SessionTest, AbortStopsARunningJobAtOnceAndHeartbeatsNameItWhileItRuns) {
  constexpr int64_t kSteps = 1000000;  // many minutes at this size: only the abort ends it in time
  Worker w(coord_, dir_.File("work"));
  Running run(w, Assign("j-long", 3, Spec(kSteps)));
  ASSERT_TRUE(coord_.WaitFor([](const Messages& ms) { return Steps(ms, "j-long", 3).size() >= 2; }, seconds(60)));
  v1::Heartbeat hb;
  w.session->FillHeartbeat(&hb);
  EXPECT_EQ(hb.job_id(), "j-long");
  EXPECT_EQ(hb.generation(), 3);
  ASSERT_EQ(hb.ranks_size(), 1);
  EXPECT_EQ(hb.ranks(0).rank(), 0);
  EXPECT_GE(hb.ranks(0).step(), 2);
  EXPECT_EQ(hb.ranks(0).collectives_done(), 0u);  // one rank: no group
  EXPECT_EQ(w.JobInfo("j-long"), 1);

  w.session->Abort();
  ASSERT_TRUE(coord_.WaitFor(HasDone("j-long", 3), seconds(20))) << "no JobDone within 20 s of Abort";
  const Messages ms = coord_.messages();
  const v1::JobDone d = *DoneOf(ms, "j-long", 3);
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(d.code(), static_cast<int>(absl::StatusCode::kCancelled));
  EXPECT_EQ(d.error(), "cancelled");
  const std::vector<int64_t> steps = Steps(ms, "j-long", 3);
  ASSERT_FALSE(steps.empty());
  EXPECT_LT(steps.back(), kSteps);
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], static_cast<int64_t>(i + 1));
  run.Join();  // Run returns just after sending the JobDone
  hb.Clear();
  w.session->FillHeartbeat(&hb);
  EXPECT_EQ(hb.job_id(), "");
  EXPECT_EQ(w.JobInfo("j-long"), 0);
}

TEST_F(SessionTest, CheckpointPartsReachTheShardServerAndAResumedAssignmentStartsFromThem) {
  metrics::Registry shard_registry;
  auto svc = shardserver::ShardService::Open(dir_.File("shard"), &shard_registry);
  ASSERT_TRUE(svc.ok()) << svc.status();
  grpc::ServerBuilder b;
  int port = 0;
  std::unique_ptr<grpc::Server> shard =
      b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port).RegisterService(svc->get()).BuildAndStart();
  ASSERT_GT(port, 0);
  const std::string addr = absl::StrCat("127.0.0.1:", port);
  const std::string ckpt = "checkpoint: {every: 2, dir: " + dir_.File("unused") + "}\n";

  Worker w(coord_, dir_.File("work"));
  v1::Assignment a = Assign("j-ckpt", 1, Spec(4, ckpt));
  a.add_shard_servers(addr);
  w.session->Run(a);
  ASSERT_TRUE(coord_.WaitFor(HasDone("j-ckpt", 1), seconds(30)));
  Messages ms = coord_.messages();
  ASSERT_TRUE(DoneOf(ms, "j-ckpt", 1)->ok()) << DoneOf(ms, "j-ckpt", 1)->error();
  std::map<int64_t, v1::CheckpointPart> parts;  // by step
  for (const auto& m : ms) {
    if (m.has_checkpoint_part()) {
      EXPECT_TRUE(parts.emplace(m.checkpoint_part().step(), m.checkpoint_part()).second) << "two parts of one step";
    }
  }
  ASSERT_EQ(parts.size(), 2u);
  ASSERT_TRUE(parts.count(2) && parts.count(4));
  for (const auto& [step, p] : parts) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    EXPECT_EQ(p.job_id(), "j-ckpt");
    EXPECT_EQ(p.generation(), 1);
    EXPECT_EQ(p.rank(), 0);
    EXPECT_GT(p.bytes(), 0);
    bool manifest = false;
    for (const auto& f : p.files()) {
      EXPECT_EQ(f.shard_server(), addr) << f.name();
      manifest |= f.name() == "manifest.json";
    }
    EXPECT_TRUE(manifest);
    // Rank 0's manifest, stamped with the placement.
    const auto j = nlohmann::json::parse(p.manifest_json(), nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << p.manifest_json();
    EXPECT_EQ(j.value("job_id", ""), "j-ckpt");
    EXPECT_EQ(j.value("generation", int64_t{-1}), 1);
  }
  // The coordinator commits step 4 with the parts it was told of; a later generation is
  // told to resume from it, and reads it from the shard server.
  std::vector<std::string> names;
  for (const auto& f : parts[4].files()) names.push_back(f.name());
  ASSERT_TRUE(shardserver::CommitCheckpoint(addr, "j-ckpt", 4, names, parts[4].manifest_json()).ok());
  v1::Assignment again = Assign("j-ckpt", 2, Spec(6, ckpt));
  again.add_shard_servers(addr);
  again.set_resume_step(4);
  again.set_resume_job_id("j-ckpt");
  w.session->Run(again);
  ASSERT_TRUE(coord_.WaitFor(HasDone("j-ckpt", 2), seconds(30)));
  ms = coord_.messages();
  EXPECT_TRUE(DoneOf(ms, "j-ckpt", 2)->ok()) << DoneOf(ms, "j-ckpt", 2)->error();
  EXPECT_EQ(Steps(ms, "j-ckpt", 2), (std::vector<int64_t>{5, 6}));
  shard->Shutdown(std::chrono::system_clock::now() + seconds(5));
}

TEST_F(SessionTest, AbortEndsARankWhosePeerIsGoneWithoutWaitingOutTheFailureGrace) {
  // Two workers, a rank each, of a job whose collectives time out after 30 s (and whose
  // failure reports are waited for 40 s). Rank 0's worker is shutting down: it stops after
  // step 1, and rank 1's step 2 all-reduce fails with no report from rank 0 coming.
  const std::string spec = Spec(1000, "parallel: {dp: 2, timeout_s: 30}\n");
  Worker w0(coord_, dir_.File("w0")), w1(coord_, dir_.File("w1"));
  w0.stop = true;
  Running r0(w0, Assign("j-pair", 1, spec, 0, 2)), r1(w1, Assign("j-pair", 1, spec, 1, 2));
  ASSERT_TRUE(coord_.WaitFor(HasDone("j-pair", 1, 0), seconds(60)));
  Messages ms = coord_.messages();
  const v1::JobDone d0 = *DoneOf(ms, "j-pair", 1, 0);
  EXPECT_EQ(d0.code(), static_cast<int>(absl::StatusCode::kCancelled));
  EXPECT_EQ(d0.error(), "worker shutting down (SIGTERM)");
  EXPECT_EQ(Steps(ms, "j-pair", 1), (std::vector<int64_t>{1}));  // rank 0 speaks for both

  // Rank 1 did step 1 with rank 0 (its heartbeat says so, with the collectives it completed).
  v1::Heartbeat hb;
  ASSERT_TRUE(testing::PollUntil(
      [&] {
        hb.Clear();
        w1.session->FillHeartbeat(&hb);
        return hb.ranks_size() == 1 && hb.ranks(0).step() == 1;
      },
      seconds(30)))
      << hb.ShortDebugString();
  EXPECT_EQ(hb.job_id(), "j-pair");
  EXPECT_EQ(hb.ranks(0).rank(), 1);
  EXPECT_GT(hb.ranks(0).collectives_done(), 0u);
  ASSERT_FALSE(DoneOf(coord_.messages(), "j-pair", 1, 1)) << "rank 1 ended before the abort";

  w1.session->Abort();
  ASSERT_TRUE(coord_.WaitFor(HasDone("j-pair", 1, 1), seconds(20))) << "rank 1 still runs 20 s after Abort";
  const v1::JobDone d1 = *DoneOf(coord_.messages(), "j-pair", 1, 1);
  EXPECT_FALSE(d1.ok());
  // Aborted in (or after) step 2's collective, waiting for rank 0's failure report included
  // (ABORTED, as Communicator::Abort promises); CANCELLED if the abort came while rank 1 was
  // still in step 1's report.
  if (d1.code() != static_cast<int>(absl::StatusCode::kCancelled)) {
    EXPECT_EQ(d1.code(), static_cast<int>(absl::StatusCode::kAborted)) << d1.error();
    EXPECT_NE(d1.error().find("aborted"), std::string::npos) << d1.error();
  }
}

}  // namespace
}  // namespace gantry::agent
