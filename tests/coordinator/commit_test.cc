// Checkpoint commits off the coordinator's reactors (issue 18), against in-process shard
// servers over loopback gRPC whose commits the test can hold open:
//  - OnCheckpointPart returns while the shard server still holds the commit, and the worker's
//    next messages are handled meanwhile; its end of job is applied after the commit, so the
//    job SUCCEEDS only once its last checkpoint is committed.
//  - A worker lost while its checkpoint commits: the job restarts after the commit, from it.
//  - Commit, listing and deletes (checkpoint.keep) of every checkpoint go over one channel per
//    shard server; a commit past its deadline, or refused by one of two servers, fails, is
//    counted and said in an event; servers commit one after another, a refusal stops the
//    rest, and the commits that landed are deleted again.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/cluster.h"
#include "tests/coordinator/cluster_test_util.h"
#include "tests/test_util.h"

namespace gantry::coordinator {
namespace {

// A shard server's checkpoint calls. Commits are answered at once, or held (the handler
// returns without finishing its call, as a slow disk would keep it) until Release(); a held
// commit that is released OK is stored. Lists and deletes answer at once. The peer of every
// call is kept: one peer means one channel.
class HoldingShardServer final : public v1::ShardServer::CallbackService {
 public:
  HoldingShardServer() {
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(this);
    server_ = b.BuildAndStart();
    address_ = absl::StrCat("127.0.0.1:", port);
  }
  ~HoldingShardServer() override {
    Release(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }
  const std::string& address() const { return address_; }

  grpc::ServerUnaryReactor* Commit(grpc::CallbackServerContext* ctx, const v1::CommitRequest* req,
                                   v1::CommitResponse*) override {
    auto* r = ctx->DefaultReactor();
    std::lock_guard<std::mutex> l(mu_);
    peers_.insert(ctx->peer());
    if (hold_) {
      held_.push_back({r, *req});
      cv_.notify_all();
      return r;
    }
    stored_[req->step()] = *req;
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* ListCheckpoints(grpc::CallbackServerContext* ctx, const v1::ListCheckpointsRequest* req,
                                            v1::ListCheckpointsResponse* resp) override {
    std::lock_guard<std::mutex> l(mu_);
    peers_.insert(ctx->peer());
    for (const auto& [step, c] : stored_) {
      if (c.job_id() != req->job_id()) continue;
      v1::CheckpointInfo* info = resp->add_checkpoints();
      info->set_job_id(c.job_id());
      info->set_step(step);
      info->set_manifest_json(c.manifest_json());
      for (const auto& p : c.parts()) info->add_parts(p);
    }
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
  grpc::ServerUnaryReactor* DeleteCheckpoint(grpc::CallbackServerContext* ctx, const v1::DeleteCheckpointRequest* req,
                                             v1::DeleteCheckpointResponse*) override {
    std::lock_guard<std::mutex> l(mu_);
    peers_.insert(ctx->peer());
    stored_.erase(req->step());
    deleted_.push_back(req->step());
    auto* r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }

  void Hold() {
    std::lock_guard<std::mutex> l(mu_);
    hold_ = true;
  }
  // Answers the held commits with s (OK: stored) and stops holding.
  void Release(const grpc::Status& s) {
    std::lock_guard<std::mutex> l(mu_);
    hold_ = false;
    for (auto& [r, req] : held_) {
      if (s.ok()) stored_[req.step()] = req;
      r->Finish(s);
    }
    held_.clear();
  }
  // Waits (up to 30 s) until n commits are held.
  bool WaitHeld(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(30), [&] { return held_.size() >= n; });
  }
  std::set<std::string> peers() {
    std::lock_guard<std::mutex> l(mu_);
    return peers_;
  }
  std::vector<int64_t> stored() {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<int64_t> out;
    for (const auto& [step, c] : stored_) out.push_back(step);
    return out;
  }
  std::vector<int64_t> deleted() {
    std::lock_guard<std::mutex> l(mu_);
    return deleted_;
  }

 private:
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;
  std::vector<std::pair<grpc::ServerUnaryReactor*, v1::CommitRequest>> held_;
  std::map<int64_t, v1::CommitRequest> stored_;  // by step
  std::vector<int64_t> deleted_;
  std::set<std::string> peers_;
};

class CommitTest : public ::testing::Test {
 protected:
  void Start(int servers, shardserver::ShardDeadlines deadlines = {}) {
    for (int i = 0; i < servers; ++i) shards_.push_back(std::make_unique<HoldingShardServer>());
    store_ = *Store::Open(dir_.File("db"));
    ClusterOptions o;
    o.placement_grace_ms = 0;
    o.shard_deadlines = deadlines;
    cluster_ = std::make_unique<Cluster>(store_.get(), &registry_, o);
    for (const auto& s : shards_) {
      v1::RegisterShardServerRequest r;
      r.set_address(s->address());
      cluster_->RegisterShardServer(r);
    }
  }
  void TearDown() override {
    if (cluster_) cluster_->WaitForCommits();
  }
  std::string Submit(int keep, int max_restarts = 0) {
    return SubmitTinyJob(*cluster_, *store_, "c", 1,
                         absl::StrCat("checkpoint: {every: 2, dir: /unused, keep: ", keep,
                                      "}\nscheduling: {max_restarts: ", max_restarts, "}\n"));
  }
  // A job (one rank) placed on worker_ (session_).
  void PlaceJob(int keep, int max_restarts = 0) {
    worker_ = cluster_->AddWorker(&session_, v1::Resources());
    job_ = Submit(keep, max_restarts);
    ASSERT_NE(FakeSession::Assigned(session_.Take()), nullptr) << "the job was not placed";
  }
  // Rank 0's part of step: a part file on every shard server, the manifest and config with
  // the first (as a worker reports them).
  void Part(const std::string& worker, const std::string& job, int64_t generation, int64_t step) {
    v1::CheckpointPart p;
    p.set_job_id(job);
    p.set_generation(generation);
    p.set_rank(0);
    p.set_step(step);
    p.set_bytes(1000);
    p.set_manifest_json("{}");
    for (size_t i = 0; i < shards_.size(); ++i) {
      auto add = [&](const std::string& name) {
        auto* f = p.add_files();
        f->set_name(name);
        f->set_shard_server(shards_[i]->address());
      };
      add(absl::StrCat("part-00000-00", i, ".safetensors"));
      if (i == 0) {
        add("manifest.json");
        add("config.json");
      }
    }
    cluster_->OnCheckpointPart(worker, p);
  }
  // The two shard servers in the order a commit goes through them (address order).
  std::pair<HoldingShardServer*, HoldingShardServer*> CommitOrder() {
    HoldingShardServer* a = shards_[0].get();
    HoldingShardServer* b = shards_[1].get();
    return b->address() < a->address() ? std::make_pair(b, a) : std::make_pair(a, b);
  }
  // Rank 0's part of step 4 with server's commits held; once the commit has reached it,
  // runs `held`, has the server refuse it saying why, and waits for the commit to end.
  void CommitRefusedBy(HoldingShardServer* server, const std::string& why, const std::function<void()>& held = [] {}) {
    server->Hold();
    Part(worker_, job_, 1, 4);
    ASSERT_TRUE(server->WaitHeld(1)) << "the commit did not reach " << server->address();
    held();
    server->Release(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, why));
    cluster_->WaitForCommits();
  }
  v1::Job Job(const std::string& id) { return *store_->GetJob(id); }
  // Index of the job's first event that says `text` (or has state `state`), -1 if none.
  int EventIndex(const std::string& job, const std::string& text, v1::JobState state = v1::JOB_STATE_UNSPECIFIED) {
    const auto events = *store_->Events(job, 0, 1000);
    for (size_t i = 0; i < events.size(); ++i) {
      if (state != v1::JOB_STATE_UNSPECIFIED ? events[i].has_state() && events[i].state() == state
                                             : events[i].message().find(text) != std::string::npos) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }
  double Counter(const std::string& name) {
    const std::string text = registry_.Render();
    const auto at = text.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
  }

  testing::TempDir dir_;
  metrics::Registry registry_;
  std::vector<std::unique_ptr<HoldingShardServer>> shards_;
  FakeSession session_;  // outlives the cluster
  std::string worker_, job_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Cluster> cluster_;
};

TEST_F(CommitTest, AJobEndsOnlyAfterItsCheckpointIsCommittedAndTheCommitWaitsForNoOne) {
  Start(1);
  PlaceJob(/*keep=*/0);
  const std::string w = worker_, job = job_;
  const int64_t gen = Job(job).generation();

  shards_[0]->Hold();
  Part(w, job, gen, 4);  // returns while the shard server holds the commit
  ASSERT_TRUE(shards_[0]->WaitHeld(1)) << "the commit reached the shard server";
  EXPECT_EQ(EventIndex(job, "checkpoint of step 4"), -1) << "not committed yet";
  v1::StepUpdate u;
  u.set_job_id(job);
  u.set_generation(gen);
  u.mutable_report()->set_step(5);
  cluster_->OnStep(w, u);
  EXPECT_EQ(Job(job).steps_done(), 5) << "the worker's next messages are handled during the commit";
  v1::JobDone d;
  d.set_job_id(job);
  d.set_generation(gen);
  d.set_rank(0);
  d.set_ok(true);
  cluster_->OnDone(w, d);
  EXPECT_EQ(Job(job).state(), v1::RUNNING) << "the job's end waits for its checkpoint's commit";

  shards_[0]->Release(grpc::Status::OK);
  cluster_->WaitForCommits();
  const v1::Job done = Job(job);
  EXPECT_EQ(done.state(), v1::SUCCEEDED);
  EXPECT_EQ(done.checkpoint_step(), 4);
  ASSERT_EQ(done.checkpoint_servers_size(), 1);
  EXPECT_EQ(done.checkpoint_servers(0), shards_[0]->address());
  const int committed = EventIndex(job, "checkpoint of step 4 committed on " + shards_[0]->address());
  const int succeeded = EventIndex(job, "", v1::SUCCEEDED);
  ASSERT_GE(committed, 0);
  EXPECT_LT(committed, succeeded) << "the commit's event comes before the job's end";
}

TEST_F(CommitTest, AWorkerLostDuringACommitRestartsItsJobFromThatCheckpoint) {
  Start(1);
  PlaceJob(/*keep=*/0, /*max_restarts=*/2);
  const std::string w1 = worker_, job = job_;
  FakeSession s2;
  cluster_->AddWorker(&s2, v1::Resources());  // the spare

  shards_[0]->Hold();
  Part(w1, job, 1, 6);
  ASSERT_TRUE(shards_[0]->WaitHeld(1));
  cluster_->RemoveWorker(w1, "its attach stream closed");
  EXPECT_EQ(Job(job).generation(), 1) << "the restart waits for the commit in flight";
  EXPECT_EQ(FakeSession::Assigned(s2.Take()), nullptr);

  shards_[0]->Release(grpc::Status::OK);
  cluster_->WaitForCommits();
  const v1::Job restarted = Job(job);
  EXPECT_EQ(restarted.generation(), 2) << "placed again on the spare worker";
  EXPECT_EQ(restarted.restarts(), 1);
  EXPECT_EQ(restarted.checkpoint_step(), 6) << "from the checkpoint that was committing";
  EXPECT_NE(FakeSession::Assigned(s2.Take()), nullptr);
  const int committed = EventIndex(job, "checkpoint of step 6 committed");
  const int restart = EventIndex(job, "restart 1 of 2");
  ASSERT_GE(committed, 0);
  EXPECT_LT(committed, restart);
}

TEST_F(CommitTest, CommitsListingsAndDeletesShareOneChannelPerShardServer) {
  Start(1);
  PlaceJob(/*keep=*/1);
  const std::string w = worker_, job = job_;
  for (int64_t step : {2, 4, 6}) {
    Part(w, job, 1, step);
    cluster_->WaitForCommits();
  }
  EXPECT_EQ(shards_[0]->stored(), std::vector<int64_t>({6})) << "checkpoint.keep 1: the newest stays";
  EXPECT_EQ(shards_[0]->deleted(), std::vector<int64_t>({2, 4}));
  EXPECT_EQ(shards_[0]->peers().size(), 1u) << "3 commits, 3 listings and 2 deletes came over one connection";
  EXPECT_EQ(Counter("gantry_coordinator_checkpoints_committed_total"), 3);
}

TEST_F(CommitTest, ACommitPastItsDeadlineFailsAndSaysSo) {
  shardserver::ShardDeadlines quick;
  quick.commit_seconds = 0.3;
  Start(1, quick);
  PlaceJob(/*keep=*/0);
  const std::string w = worker_, job = job_;
  shards_[0]->Hold();
  Part(w, job, 1, 4);
  ASSERT_TRUE(shards_[0]->WaitHeld(1));
  cluster_->WaitForCommits();  // ends with the deadline; the server still holds the call
  const int failed = EventIndex(job, "checkpoint of step 4 not committed: committing checkpoint on " +
                                         shards_[0]->address() + ": Deadline Exceeded");
  EXPECT_GE(failed, 0) << "no event names the server and the deadline";
  EXPECT_EQ(Counter("gantry_coordinator_checkpoints_failed_total"), 1);
  EXPECT_EQ(Job(job).checkpoint_step(), 0);
}

TEST_F(CommitTest, ACommitTheSecondServerRefusesIsRemovedFromTheFirst) {
  Start(2);
  PlaceJob(/*keep=*/0);
  auto [first, second] = CommitOrder();
  CommitRefusedBy(second, "part 'x' is not fully written", [first = first] {
    EXPECT_EQ(first->stored(), std::vector<int64_t>({4})) << "the second server's commit comes once the first's is done";
  });
  EXPECT_GE(EventIndex(job_, "checkpoint of step 4 not committed: committing checkpoint on " + second->address() +
                                 ": part 'x' is not fully written"),
            0);
  EXPECT_EQ(first->deleted(), std::vector<int64_t>({4})) << "the commit that landed is deleted again";
  EXPECT_TRUE(first->stored().empty());
  EXPECT_EQ(Job(job_).checkpoint_step(), 0);
}

TEST_F(CommitTest, AFirstServerThatRefusesStopsTheCommit) {
  Start(2);
  PlaceJob(/*keep=*/0);
  auto [first, second] = CommitOrder();
  CommitRefusedBy(first, "part 'y' is not fully written");
  EXPECT_GE(EventIndex(job_, "checkpoint of step 4 not committed: committing checkpoint on " + first->address() +
                                 ": part 'y' is not fully written"),
            0);
  EXPECT_TRUE(second->stored().empty()) << "nothing is committed after a refusal";
  EXPECT_TRUE(second->deleted().empty()) << "and so nothing is deleted";
}

}  // namespace
}  // namespace gantry::coordinator
