// Authorisation on every coordinator RPC (common/authz.h), in process over loopback with a
// principals file: a table of every method of gantry.v1.Coordinator against every kind of
// caller (admin, the job's owner, a teammate, a user of another team, a viewer, a worker
// identity, a shard-server identity), each call allowed or refused PERMISSION_DENIED naming
// who, the action and the object. The table is checked against the service's descriptor: a
// method without a row fails the test, so a new RPC cannot go unchecked. Then what the rules
// mean for jobs: the owner and team a job records (and keeps across a coordinator restart),
// listings that hold only what the caller may read and their filters, and the audit trail of
// who submitted and who cancelled a job in its events.
#include <google/protobuf/descriptor.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
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
#include "tests/authz_table_util.h"
#include "tests/coordinator/cluster_test_util.h"
#include "tests/test_util.h"

namespace gantry::coordinator {
namespace {

using testing::As;
using testing::AuthzTable;
using testing::Caller;

constexpr char kSpec[] =
    "name: tiny\nmodel: {n_layer: 1, n_head: 2, n_embd: 16, vocab_size: 256, seq_len: 16}\n"
    "data: {train: /nonexistent/train.bin}\ntrain: {steps: 10, micro_batch: 2, lr: 1.0e-3}\n";

class AuthzRpcTest : public ::testing::Test, protected ServedCoordinator {
 protected:
  void SetUp() override {
    file_ = testing::ServeAuthzPrincipals(path_);
    ASSERT_NE(file_, nullptr);
    // Quotas for both teams (GetQuotas): vision's 0 cpu slots hold its jobs.
    quotas_ = [] {
      auto q = std::make_shared<TeamQuotas>();
      (*q)["vision"].team = "vision";
      (*q)["vision"].nominal["cpu"] = 0;
      (*q)["nlp"].team = "nlp";
      (*q)["nlp"].max_running_jobs = 2;
      return std::shared_ptr<const TeamQuotas>(std::move(q));
    };
    StartServer(dir_.File("db"));
  }
  void TearDown() override {
    StopServer();
    SetProcessPrincipals(nullptr);
  }
  std::string Submit(Caller c) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(kSpec);
    v1::SubmitJobResponse resp;
    const grpc::Status s = stub_->SubmitJob(As(c).get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }
  std::vector<std::string> List(Caller c, const v1::ListJobsRequest& req, grpc::Status* status = nullptr) {
    v1::ListJobsResponse resp;
    const grpc::Status s = stub_->ListJobs(As(c).get(), req, &resp);
    if (status != nullptr) *status = s;
    else EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<std::string> ids;
    for (const auto& j : resp.jobs()) ids.push_back(j.id());
    return ids;
  }
  std::vector<v1::JobEvent> Events(const std::string& job) { return *store_->Events(job, 0, 1000); }

  testing::TempDir dir_;
  const std::string path_ = dir_.File("principals.yaml");
  std::unique_ptr<PrincipalsFile> file_;
};

TEST_F(AuthzRpcTest, EveryMethodAgainstEveryCaller) {
  const std::string job = Submit(Caller::kOwner);  // alice's, team vision
  const std::set<Caller> all = {Caller::kAdmin,  Caller::kOwner,  Caller::kTeammate,   Caller::kOtherTeam,
                                Caller::kViewer, Caller::kWorker, Caller::kShardServer};
  const std::set<Caller> users = {Caller::kAdmin, Caller::kOwner, Caller::kTeammate, Caller::kOtherTeam};
  const std::set<Caller> readers = {Caller::kAdmin, Caller::kOwner, Caller::kTeammate, Caller::kOtherTeam,
                                    Caller::kViewer};
  const std::set<Caller> job_readers = {Caller::kAdmin, Caller::kOwner, Caller::kTeammate, Caller::kViewer};
  AuthzTable table;
  table["SubmitJob"] = {users, [&](Caller c) {
                          v1::SubmitJobRequest req;
                          req.set_spec_yaml(kSpec);
                          v1::SubmitJobResponse resp;
                          return FromGrpc(stub_->SubmitJob(As(c).get(), req, &resp));
                        }};
  table["GetJob"] = {job_readers, [&](Caller c) {
                       v1::GetJobRequest req;
                       req.set_job_id(job);
                       v1::Job resp;
                       return FromGrpc(stub_->GetJob(As(c).get(), req, &resp));
                     }};
  table["ListJobs"] = {readers, [&](Caller c) {
                         v1::ListJobsResponse resp;
                         return FromGrpc(stub_->ListJobs(As(c).get(), v1::ListJobsRequest(), &resp));
                       }};
  table["CancelJob"] = {{Caller::kAdmin, Caller::kOwner}, [&](Caller c) {
                          v1::CancelJobRequest req;
                          req.set_job_id(job);
                          v1::Job resp;
                          return FromGrpc(stub_->CancelJob(As(c).get(), req, &resp));
                        }};
  table["WatchJob"] = {job_readers, [&](Caller c) {
                         v1::WatchJobRequest req;
                         req.set_job_id(job);
                         auto ctx = As(c);
                         auto reader = stub_->WatchJob(ctx.get(), req);
                         v1::JobEvent e;
                         const bool got = reader->Read(&e);  // allowed: its first event, PENDING
                         if (got) ctx->TryCancel();
                         const grpc::Status s = reader->Finish();
                         if (got) return e.state() == v1::PENDING ? absl::OkStatus() : absl::InternalError("not the first event");
                         return FromGrpc(s);
                       }};
  table["ListWorkers"] = {readers, [&](Caller c) {
                            v1::ListWorkersResponse resp;
                            return FromGrpc(stub_->ListWorkers(As(c).get(), v1::ListWorkersRequest(), &resp));
                          }};
  table["Attach"] = {{Caller::kAdmin, Caller::kWorker}, [&](Caller c) {
                       auto ctx = As(c);
                       auto stream = stub_->Attach(ctx.get());
                       stream->WritesDone();  // allowed: the session ends at once, OK
                       return FromGrpc(stream->Finish());
                     }};
  table["RendezvousPut"] = {{Caller::kAdmin, Caller::kWorker}, [&](Caller c) {
                              v1::RendezvousPutRequest req;
                              req.set_job_id(job);
                              req.set_generation(1);
                              req.set_key("nccl-id");
                              req.set_value("x");
                              v1::RendezvousPutResponse resp;
                              return FromGrpc(stub_->RendezvousPut(As(c).get(), req, &resp));
                            }};
  table["RendezvousGet"] = {{Caller::kAdmin, Caller::kWorker}, [&](Caller c) {
                              v1::RendezvousGetRequest req;
                              req.set_job_id(job);
                              req.set_generation(1);
                              req.set_key("nccl-id");
                              v1::RendezvousGetResponse resp;
                              return FromGrpc(stub_->RendezvousGet(As(c).get(), req, &resp));
                            }};
  table["RegisterShardServer"] = {{Caller::kAdmin, Caller::kShardServer}, [&](Caller c) {
                                    v1::RegisterShardServerRequest req;
                                    req.set_address("127.0.0.1:1");
                                    v1::RegisterShardServerResponse resp;
                                    return FromGrpc(stub_->RegisterShardServer(As(c).get(), req, &resp));
                                  }};
  table["ListShardServers"] = {readers, [&](Caller c) {
                                 v1::ListShardServersResponse resp;
                                 return FromGrpc(stub_->ListShardServers(As(c).get(), v1::ListShardServersRequest(), &resp));
                               }};
  table["WhoAmI"] = {all, [&](Caller c) {
                       v1::WhoAmIResponse resp;
                       return FromGrpc(stub_->WhoAmI(As(c).get(), v1::WhoAmIRequest(), &resp));
                     }};

  table["GetQuotas"] = {job_readers, [&](Caller c) {  // team vision's: its users, viewers, admins
                         v1::GetQuotasRequest req;
                         req.set_team("vision");
                         v1::GetQuotasResponse resp;
                         return FromGrpc(stub_->GetQuotas(As(c).get(), req, &resp));
                       }};

  testing::CheckCoversService(table, "gantry.v1.Coordinator");
  testing::CheckEveryCaller(table);
}

TEST_F(AuthzRpcTest, RefusalsNameWhoTheActionAndTheObject) {
  const std::string job = Submit(Caller::kOwner);
  {  // a user's token attaching as a worker
    auto ctx = As(Caller::kOtherTeam);
    auto stream = stub_->Attach(ctx.get());
    v1::WorkerMessage m;
    m.mutable_register_()->set_host("laptop");
    stream->Write(m);  // may fail: the call is refused as it opens
    stream->WritesDone();
    const grpc::Status s = stream->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(s.error_message(),
              "user erin (team nlp, role user) may not attach as a worker to the cluster: only worker identities attach "
              "and use the rendezvous store");
  }
  {  // a user's token registering as a shard server
    v1::RegisterShardServerRequest req;
    req.set_address("10.0.0.9:7000");
    v1::RegisterShardServerResponse resp;
    const grpc::Status s = stub_->RegisterShardServer(As(Caller::kOwner).get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(s.error_message(),
              "user alice (team vision, role user) may not register as a shard server with the cluster: only "
              "shard-server identities register");
    EXPECT_TRUE(cluster_->ShardServers().empty()) << "nothing registered";
  }
  {  // a teammate cancelling
    v1::CancelJobRequest req;
    req.set_job_id(job);
    v1::Job resp;
    const grpc::Status s = stub_->CancelJob(As(Caller::kTeammate).get(), req, &resp);
    EXPECT_EQ(s.error_message(), absl::StrCat("user dave (team vision, role user) may not cancel job ", job,
                                              " (owner alice, team vision): users cancel only their own jobs"));
    EXPECT_EQ(store_->GetJob(job)->state(), v1::PENDING) << "not cancelled";
  }
  {  // a viewer submitting
    v1::SubmitJobRequest req;
    req.set_spec_yaml(kSpec);
    v1::SubmitJobResponse resp;
    const grpc::Status s = stub_->SubmitJob(As(Caller::kViewer).get(), req, &resp);
    EXPECT_EQ(s.error_message(),
              "user carol (team nlp, role viewer) may not submit jobs to the cluster: viewers only read");
  }
  {  // a job started from the checkpoint of a job of another team: it would read it
    v1::SubmitJobRequest req;
    req.set_spec_yaml(absl::StrCat(kSpec, "checkpoint: {resume_from: '", job, "'}\n"));
    v1::SubmitJobResponse resp;
    const grpc::Status s = stub_->SubmitJob(As(Caller::kOtherTeam).get(), req, &resp);
    EXPECT_EQ(s.error_message(),
              absl::StrCat("checkpoint.resume_from: user erin (team nlp, role user) may not read the checkpoints of job ",
                           job, " (owner alice, team vision): users read only their own jobs and their team's"));
    EXPECT_TRUE(stub_->SubmitJob(As(Caller::kTeammate).get(), req, &resp).ok()) << "a teammate may";
  }
  {  // a worker reading a job
    v1::GetJobRequest req;
    req.set_job_id(job);
    v1::Job resp;
    const grpc::Status s = stub_->GetJob(As(Caller::kWorker).get(), req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_NE(s.error_message().find(absl::StrCat("worker gpu-pool-a may not read job ", job)), std::string::npos)
        << s.error_message();
  }
}

TEST_F(AuthzRpcTest, JobsRecordTheirOwnerAndListingsHoldWhatTheCallerMayRead) {
  const std::string a = Submit(Caller::kOwner);      // alice, vision
  const std::string d = Submit(Caller::kTeammate);   // dave, vision
  const std::string e = Submit(Caller::kOtherTeam);  // erin, nlp
  const std::string r = Submit(Caller::kAdmin);      // root, no team
  v1::GetJobRequest get;
  get.set_job_id(a);
  v1::Job job;
  ASSERT_TRUE(stub_->GetJob(As(Caller::kOwner).get(), get, &job).ok());
  EXPECT_EQ(job.owner(), "alice");
  EXPECT_EQ(job.team(), "vision");

  using Ids = std::vector<std::string>;
  v1::ListJobsRequest req;
  EXPECT_EQ(List(Caller::kOwner, req), (Ids{d, a})) << "alice: her own and her team's, newest first";
  EXPECT_EQ(List(Caller::kOtherTeam, req), (Ids{e}));
  EXPECT_EQ(List(Caller::kViewer, req), (Ids{r, e, d, a})) << "a viewer reads every team's";
  EXPECT_EQ(List(Caller::kAdmin, req), (Ids{r, e, d, a}));
  grpc::Status refused;
  EXPECT_TRUE(List(Caller::kWorker, req, &refused).empty());
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);

  v1::ListJobsRequest mine;
  mine.set_mine(true);
  EXPECT_EQ(List(Caller::kOwner, mine), (Ids{a}));
  EXPECT_EQ(List(Caller::kAdmin, mine), (Ids{r}));
  v1::ListJobsRequest team;
  team.set_team("vision");
  EXPECT_EQ(List(Caller::kAdmin, team), (Ids{d, a}));
  team.set_team("nlp");
  EXPECT_EQ(List(Caller::kOwner, team), Ids{}) << "another team's jobs are not alice's to read";
  v1::ListJobsRequest owner;
  owner.set_owner("dave");
  EXPECT_EQ(List(Caller::kViewer, owner), (Ids{d}));

  // Pages of one job each: the jobs alice may not read are passed over, not returned as gaps.
  v1::ListJobsRequest paged;
  paged.set_page_size(1);
  Ids seen;
  for (int i = 0; i < 10; ++i) {
    v1::ListJobsResponse resp;
    ASSERT_TRUE(stub_->ListJobs(As(Caller::kOwner).get(), paged, &resp).ok());
    for (const auto& j : resp.jobs()) seen.push_back(j.id());
    EXPECT_EQ(resp.jobs_size(), 1);
    if (resp.next_page_token().empty()) break;
    paged.set_page_token(resp.next_page_token());
  }
  EXPECT_EQ(seen, (Ids{d, a}));

  // The owner and team are in the job's record: a coordinator started again on the same
  // store has them, and applies them.
  StopServer();
  StartServer(dir_.File("db"));
  ASSERT_TRUE(stub_->GetJob(As(Caller::kTeammate).get(), get, &job).ok());
  EXPECT_EQ(job.owner(), "alice");
  EXPECT_EQ(job.team(), "vision");
  EXPECT_EQ(stub_->GetJob(As(Caller::kOtherTeam).get(), get, &job).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(List(Caller::kOtherTeam, req), (Ids{e}));
}

TEST_F(AuthzRpcTest, EventsSayWhoSubmittedAndWhoCancelled) {
  const std::string a = Submit(Caller::kOwner);
  const std::string b = Submit(Caller::kOwner);
  v1::CancelJobRequest cancel;
  cancel.set_job_id(a);
  v1::Job job;
  ASSERT_TRUE(stub_->CancelJob(As(Caller::kOwner).get(), cancel, &job).ok());
  EXPECT_EQ(job.reason(), "cancelled by user alice (team vision, role user)");
  cancel.set_job_id(b);
  ASSERT_TRUE(stub_->CancelJob(As(Caller::kAdmin).get(), cancel, &job).ok());
  EXPECT_EQ(job.reason(), "cancelled by user root (role admin)");

  auto messages = [&](const std::string& id) {
    std::vector<std::string> out;
    for (const auto& e : Events(id)) {
      if (e.has_message()) out.push_back(e.message());
      if (e.has_state()) out.push_back(v1::JobState_Name(e.state()));
    }
    return out;
  };
  using Lines = std::vector<std::string>;
  EXPECT_EQ(messages(a), (Lines{"PENDING", "submitted by user alice (team vision, role user)",
                                "cancelled by user alice (team vision, role user)", "CANCELLED"}));
  EXPECT_EQ(messages(b), (Lines{"PENDING", "submitted by user alice (team vision, role user)",
                                "cancelled by user root (role admin)", "CANCELLED"}));
}

// GetQuotas: a user sees their own team (asking for another is refused, naming the team),
// viewers and admins every team; what it holds: the quota, the queued and held jobs.
// scheduling.preemptible: false only within the team's nominal quota (coordinator/quota.h):
// vision's quota is 0 cpu slots, nlp has none of cpu; the refusal says which and why.
TEST_F(AuthzRpcTest, AJobThatCannotBePreemptedIsAdmittedOnlyWithinItsTeamsNominalQuota) {
  auto submit = [&](Caller c, const std::string& more) {
    v1::SubmitJobRequest req;
    req.set_spec_yaml(std::string(kSpec) + more);
    v1::SubmitJobResponse resp;
    return stub_->SubmitJob(As(c).get(), req, &resp);
  };
  grpc::Status s = submit(Caller::kOwner, "scheduling: {preemptible: false}\n");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "scheduling.preemptible: false is admitted only within the team's nominal quota: team vision's is 0 cpu "
            "slots and this job needs 1 (set scheduling.preemptible: true, or ask for a larger quota)");
  s = submit(Caller::kOtherTeam, "scheduling: {preemptible: false}\n");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(),
            "scheduling.preemptible: false is admitted only within the team's nominal quota: team nlp has no quota "
            "of cpu slots");
  s = submit(Caller::kAdmin, "scheduling: {preemptible: false}\n");
  EXPECT_NE(s.error_message().find("the job has no team"), std::string::npos) << s.error_message();
  EXPECT_TRUE(submit(Caller::kOtherTeam, "scheduling: {preemptible: true}\n").ok()) << "preemptible: any team";
  EXPECT_TRUE(submit(Caller::kOtherTeam, "").ok()) << "preemptible is the default";
}

TEST_F(AuthzRpcTest, QuotasAreReadByTeam) {
  const std::string job = Submit(Caller::kOwner);  // vision's: held by its quota of 0 cpu slots
  auto teams = [&](Caller c, const std::string& team, grpc::Status* status = nullptr) {
    v1::GetQuotasRequest req;
    req.set_team(team);
    v1::GetQuotasResponse resp;
    const grpc::Status s = stub_->GetQuotas(As(c).get(), req, &resp);
    if (status != nullptr) *status = s;
    else EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.quotas_in_force(), s.ok());
    std::vector<std::string> out;
    for (const auto& t : resp.teams()) out.push_back(t.team());
    return out;
  };
  EXPECT_EQ(teams(Caller::kOwner, ""), std::vector<std::string>{"vision"});
  EXPECT_EQ(teams(Caller::kOtherTeam, ""), std::vector<std::string>{"nlp"});
  EXPECT_EQ(teams(Caller::kViewer, ""), (std::vector<std::string>{"nlp", "vision"}));
  EXPECT_EQ(teams(Caller::kAdmin, ""), (std::vector<std::string>{"nlp", "vision"}));
  grpc::Status s;
  teams(Caller::kOtherTeam, "vision", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(),
            "user erin (team nlp, role user) may not read the quota of team vision: users read only their own team's "
            "quota");
  teams(Caller::kWorker, "", &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // What vision's row holds once a pass has run: a shard server registers (the start's grace
  // is long), and a pass is asked for as a submission does.
  {
    v1::RegisterShardServerRequest r;
    r.set_address("127.0.0.1:1");
    v1::RegisterShardServerResponse rr;
    ASSERT_TRUE(stub_->RegisterShardServer(As(Caller::kShardServer).get(), r, &rr).ok());
  }
  cluster_->JobSubmitted();
  v1::GetQuotasRequest req;
  req.set_team("vision");
  v1::GetQuotasResponse resp;
  ASSERT_TRUE(stub_->GetQuotas(As(Caller::kOwner).get(), req, &resp).ok());
  ASSERT_EQ(resp.teams_size(), 1);
  const v1::TeamQuotaStatus& t = resp.teams(0);
  ASSERT_EQ(t.devices_size(), 1);
  EXPECT_EQ(t.devices(0).device(), "cpu");
  EXPECT_EQ(t.devices(0).nominal(), 0);
  EXPECT_EQ(t.devices(0).used(), 0);
  EXPECT_EQ(t.queued_jobs(), 1);
  EXPECT_EQ(t.running_jobs(), 0);
  EXPECT_EQ(t.held_jobs(), 1);
  // The job says why it waits.
  v1::GetJobRequest get;
  get.set_job_id(job);
  v1::Job got;
  ASSERT_TRUE(stub_->GetJob(As(Caller::kOwner).get(), get, &got).ok());
  EXPECT_EQ(got.waiting_for(), "team vision's quota of 0 cpu slots is less than the 1 this job needs");
}

}  // namespace
}  // namespace gantry::coordinator
