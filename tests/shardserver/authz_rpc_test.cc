// Authorisation on every shard-server RPC and on the parameter server's data port
// (common/authz.h), in process with a principals file: tables of every method of
// gantry.v1.ShardServer and gantry.v1.ParamServer, and of every data port operation, against
// every kind of caller (admin, the job's owner, a teammate, a user of another team, a viewer,
// a worker identity, a shard-server identity): allowed, or refused PERMISSION_DENIED naming
// who. Each table is checked against its service's descriptor (the data port's against its
// operations), so that a new RPC cannot go unchecked. The checkpoint acted on is alice's
// (team vision), as the coordinator's commit records it; listings of every job's checkpoints
// hold only those the caller may read.
#include <google/protobuf/descriptor.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/param_wire.h"
#include "common/principals.h"
#include "common/rocks.h"
#include "common/rpc_edge.h"
#include "common/security.h"
#include "common/status.h"
#include "common/stream_client.h"
#include "shardserver/param_service.h"
#include "shardserver/service.h"
#include "tests/authz_table_util.h"
#include "tests/test_util.h"

namespace gantry::shardserver {
namespace {

using testing::As;
using testing::AuthzTable;
using testing::Caller;

constexpr char kJob[] = "j-000001";

class ShardAuthzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = testing::ServeAuthzPrincipals(path_);
    ASSERT_NE(file_, nullptr);
    auto svc = ShardService::Open(dir_.File("db"), &registry_);
    ASSERT_TRUE(svc.ok()) << svc.status();
    shards_ = std::move(*svc);
    params_ = std::make_unique<ParamService>(&registry_);
    grpc::ServerBuilder b;
    int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(shards_.get());
    b.RegisterService(params_.get());
    server_ = b.BuildAndStart();
    ASSERT_NE(port, 0);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
    shard_stub_ = v1::ShardServer::NewStub(channel);
    param_stub_ = v1::ParamServer::NewStub(channel);
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
    SetProcessPrincipals(nullptr);
  }
  // A committed checkpoint of job at step: one part "model.bin" holding "hello", and the
  // commit record with its owner and team, as WriteChunks and Commit store them.
  void Seed(const std::string& job, int64_t step, const std::string& owner, const std::string& team) {
    const std::string base = absl::StrFormat("%s/%012d", job, step);
    v1::CheckpointInfo info;
    info.set_job_id(job);
    info.set_step(step);
    info.set_owner(owner);
    info.set_team(team);
    info.add_parts("model.bin");
    info.add_part_bytes(5);
    info.set_bytes(5);
    rocks::Batch b;
    b.Put(absl::StrCat("chunk/", base, "/model.bin/", absl::StrFormat("%016d", 0)), "hello");
    b.Put(absl::StrCat("part/", base, "/model.bin"), "5");
    b.Put(absl::StrCat("ckpt/", base), info.SerializeAsString());
    ASSERT_TRUE(shards_->db().Write(b).ok());
  }

  testing::TempDir dir_;
  const std::string path_ = dir_.File("principals.yaml");
  std::unique_ptr<PrincipalsFile> file_;
  metrics::Registry registry_;
  std::unique_ptr<ShardService> shards_;
  std::unique_ptr<ParamService> params_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::ShardServer::Stub> shard_stub_;
  std::unique_ptr<v1::ParamServer::Stub> param_stub_;
};

const std::set<Caller> kServiceAdmins = {Caller::kAdmin, Caller::kWorker};
const std::set<Caller> kCheckpointReaders = {Caller::kAdmin, Caller::kOwner, Caller::kTeammate, Caller::kViewer,
                                             Caller::kWorker};

TEST_F(ShardAuthzTest, EveryShardServerMethodAgainstEveryCaller) {
  Seed(kJob, 1, "alice", "vision");
  AuthzTable table;
  table["WriteChunks"] = {kServiceAdmins, [&](Caller c) {
                            auto ctx = As(c);
                            v1::WriteChunksResponse resp;
                            auto writer = shard_stub_->WriteChunks(ctx.get(), &resp);
                            writer->WritesDone();  // no chunks: an empty write, OK when allowed
                            return FromGrpc(writer->Finish());
                          }};
  table["Commit"] = {{Caller::kAdmin}, [&](Caller c) {
                       v1::CommitRequest req;
                       req.set_job_id(kJob);
                       req.set_step(1);
                       req.add_parts("model.bin");
                       req.set_owner("alice");
                       req.set_team("vision");
                       v1::CommitResponse resp;
                       return FromGrpc(shard_stub_->Commit(As(c).get(), req, &resp));
                     }};
  table["ListCheckpoints"] = {kCheckpointReaders, [&](Caller c) {
                                v1::ListCheckpointsRequest req;
                                req.set_job_id(kJob);
                                v1::ListCheckpointsResponse resp;
                                absl::Status s = FromGrpc(shard_stub_->ListCheckpoints(As(c).get(), req, &resp));
                                if (s.ok() && resp.checkpoints_size() != 1) return absl::InternalError("not listed");
                                return s;
                              }};
  table["ReadChunks"] = {kCheckpointReaders, [&](Caller c) {
                           v1::ReadChunksRequest req;
                           req.set_job_id(kJob);
                           req.set_step(1);
                           req.set_part("model.bin");
                           auto ctx = As(c);
                           auto reader = shard_stub_->ReadChunks(ctx.get(), req);
                           v1::Chunk chunk;
                           std::string got;
                           while (reader->Read(&chunk)) got += chunk.data();
                           absl::Status s = FromGrpc(reader->Finish());
                           if (s.ok() && got != "hello") return absl::InternalError("not the part's bytes");
                           return s;
                         }};
  table["DeleteCheckpoint"] = {{Caller::kAdmin, Caller::kOwner}, [&](Caller c) {
                                 Seed(kJob, 1, "alice", "vision");  // again, after an allowed delete
                                 v1::DeleteCheckpointRequest req;
                                 req.set_job_id(kJob);
                                 req.set_step(1);
                                 v1::DeleteCheckpointResponse resp;
                                 absl::Status s = FromGrpc(shard_stub_->DeleteCheckpoint(As(c).get(), req, &resp));
                                 const bool there = shards_->db().Get(absl::StrFormat("ckpt/%s/%012d", kJob, 1)).ok();
                                 if (s.ok() == there) return absl::InternalError("deleted or kept against the answer");
                                 Seed(kJob, 1, "alice", "vision");
                                 return s;
                               }};
  testing::CheckCoversService(table, "gantry.v1.ShardServer");
  testing::CheckEveryCaller(table);
}

TEST_F(ShardAuthzTest, EveryParamServerMethodAgainstEveryCaller) {
  AuthzTable table;
  // Allowed calls are answered by the service for a job it has no range of (or, for
  // InitRange, with a bad range): an error other than PERMISSION_DENIED.
  table["InitRange"] = {kServiceAdmins, [&](Caller c) {
                          v1::InitRangeRequest req;
                          req.set_job_id(kJob);
                          v1::InitRangeResponse resp;
                          return FromGrpc(param_stub_->InitRange(As(c).get(), req, &resp));
                        }};
  table["WriteParams"] = {kServiceAdmins, [&](Caller c) {
                            v1::ParamsChunk req;
                            req.set_job_id(kJob);
                            v1::ParamsAck resp;
                            return FromGrpc(param_stub_->WriteParams(As(c).get(), req, &resp));
                          }};
  table["PushGradients"] = {kServiceAdmins, [&](Caller c) {
                              v1::GradientChunk req;
                              req.set_job_id(kJob);
                              v1::PushAck resp;
                              return FromGrpc(param_stub_->PushGradients(As(c).get(), req, &resp));
                            }};
  table["ReadParams"] = {kServiceAdmins, [&](Caller c) {
                           v1::ReadParamsRequest req;
                           req.set_job_id(kJob);
                           v1::ParamsChunk resp;
                           return FromGrpc(param_stub_->ReadParams(As(c).get(), req, &resp));
                         }};
  testing::CheckCoversService(table, "gantry.v1.ParamServer");
  testing::CheckEveryCaller(table);
}

// The data port carries no credentials: each port's requests are authorised as the identity
// it was started with (the daemon: the laptop's anonymous admin, and only with nothing
// configured). A port per caller, every operation of the protocol.
TEST_F(ShardAuthzTest, EveryDataPortOperationAgainstEveryCaller) {
  std::map<Caller, std::unique_ptr<ParamService>> ports;
  std::map<Caller, std::unique_ptr<net::StreamClient>> clients;
  const auto deadline = [] { return std::chrono::steady_clock::now() + std::chrono::seconds(20); };
  for (const auto& id : testing::Identities()) {
    const Principal* who = file_->current()->FindByToken(id.token);
    ASSERT_NE(who, nullptr) << id.label;
    auto& port = ports[id.caller];
    port = std::make_unique<ParamService>(&registry_);
    auto address = port->StartDataPort("127.0.0.1", {}, *who);
    ASSERT_TRUE(address.ok()) << address.status();
    auto client = net::StreamClient::Connect(*address, deadline());
    ASSERT_TRUE(client.ok()) << client.status();
    clients[id.caller] = std::move(*client);
  }
  // One request of op with a payload of `count` floats, and its reply's status.
  auto request = [&](Caller c, uint32_t op, int64_t count) -> absl::Status {
    net::ParamWireHeader h;
    h.op = op;
    h.generation = 1;
    h.step = 1;
    h.count = count;
    h.job_len = sizeof(kJob) - 1;
    std::string bytes(reinterpret_cast<const char*>(&h), sizeof(h));
    bytes += kJob;
    if (op != net::ParamWireHeader::kRead) bytes.append(count * sizeof(float), '\0');
    net::StreamClient& client = *clients[c];
    RETURN_IF_ERROR(client.Send({{bytes.data(), bytes.size()}}, deadline()));
    net::ParamWireReply r;
    RETURN_IF_ERROR(client.Receive(&r, sizeof(r), deadline()));
    std::string message(r.message_len, '\0');
    RETURN_IF_ERROR(client.Receive(message.data(), message.size(), deadline()));
    return absl::Status(static_cast<absl::StatusCode>(r.code), message);
  };
  AuthzTable table;
  table["DataPush"] = {kServiceAdmins, [&](Caller c) { return request(c, net::ParamWireHeader::kPush, 4); }};
  table["DataRead"] = {kServiceAdmins, [&](Caller c) { return request(c, net::ParamWireHeader::kRead, 4); }};
  table["DataWrite"] = {kServiceAdmins, [&](Caller c) { return request(c, net::ParamWireHeader::kWrite, 4); }};
  testing::CheckEveryCaller(table);
  // Those are all the operations the port serves: the next one is refused as unknown (a new
  // operation served without a row here fails this).
  const absl::Status unknown = request(Caller::kAdmin, net::ParamWireHeader::kWrite + 1, 0);
  EXPECT_TRUE(absl::IsInvalidArgument(unknown)) << unknown;
  EXPECT_NE(unknown.message().find("unknown operation"), std::string::npos) << unknown;
  for (auto& [c, port] : ports) port->StopDataPort(std::chrono::milliseconds(0));
}

TEST_F(ShardAuthzTest, ListingsOfEveryJobHoldOnlyWhatTheCallerMayRead) {
  Seed("j-000001", 1, "alice", "vision");
  Seed("j-000002", 1, "erin", "nlp");
  Seed("j-000003", 1, "", "");  // committed before commits recorded an owner: nobody's
  auto listed = [&](Caller c, const std::string& job = "") {
    v1::ListCheckpointsRequest req;
    req.set_job_id(job);
    v1::ListCheckpointsResponse resp;
    const grpc::Status s = shard_stub_->ListCheckpoints(As(c).get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<std::string> jobs;
    for (const auto& i : resp.checkpoints()) jobs.push_back(i.job_id() + "/" + i.owner());
    return jobs;
  };
  using Jobs = std::vector<std::string>;
  EXPECT_EQ(listed(Caller::kOwner), (Jobs{"j-000001/alice"}));
  EXPECT_EQ(listed(Caller::kTeammate), (Jobs{"j-000001/alice"}));
  EXPECT_EQ(listed(Caller::kOtherTeam), (Jobs{"j-000002/erin"}));
  EXPECT_EQ(listed(Caller::kViewer), (Jobs{"j-000001/alice", "j-000002/erin", "j-000003/"}));
  EXPECT_EQ(listed(Caller::kWorker), (Jobs{"j-000001/alice", "j-000002/erin", "j-000003/"}));

  // One job's listing that the caller may not read is refused, naming the job and its owner.
  v1::ListCheckpointsRequest req;
  req.set_job_id("j-000002");
  v1::ListCheckpointsResponse resp;
  const grpc::Status s = shard_stub_->ListCheckpoints(As(Caller::kOwner).get(), req, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message(),
            "user alice (team vision, role user) may not read the checkpoints of job j-000002 (owner erin, team nlp): "
            "users read only their own jobs and their team's");
  EXPECT_EQ(resp.checkpoints_size(), 0);
}

}  // namespace
}  // namespace gantry::shardserver
