// The coordinator's request validation (coordinator/service.h), driven through the
// service over gRPC in this process, with arbitrary requests: SubmitJob (any YAML), job
// lookups and cancels, WatchJob, the workers' Attach streams (registrations, heartbeats,
// step reports, ends of jobs, checkpoint parts), the rendezvous store and shard-server
// registration. libprotobuf-mutator is not packaged for Debian, so the input is decoded as a
// program: each operation is one byte (its low 4 bits the operation, the high 4 its
// argument: which stream, a flag), then its messages as records (a 16-bit length and
// the message's protobuf bytes, parsed with ParseFromString; bytes that do not parse leave
// the message empty; SubmitJob's record is the YAML itself). Up to three attach streams
// stay open through an input, so that a job of several ranks can be placed and run.
//
// The coordinator (its RocksDB store, cluster and service) is rebuilt every 128 inputs, so
// that what inputs leave behind (jobs, events) stays small; an input's outcome may depend
// on the ones before it in the same span, as it would in a running coordinator.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/metrics.h"
#include "coordinator/cluster.h"
#include "coordinator/service.h"
#include "coordinator/store.h"
#include "gantry/v1/coordinator.grpc.pb.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace gantry;
using namespace gantry::coordinator;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "coordinator_fuzz: %s\n", what.c_str());
  std::abort();
}

constexpr int kInputsPerWorld = 128;

struct World {
  metrics::Registry registry;
  std::unique_ptr<Store> store;
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<CoordinatorService> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  explicit World(int n) {
    // Protobuf logs every string field of invalid UTF-8 it refuses to parse; the inputs
    // make such fields all the time, and the log would bury the fuzzer's.
    google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    auto s = Store::Open(absl::StrFormat("%s/coordinator-%d", fuzz::ScratchDir(), n));
    if (!s.ok()) Fail("opening the store: " + s.status().ToString());
    store = std::move(*s);
    ClusterOptions options;
    options.placement_grace_ms = 0;  // place at once: no shard server will come
    options.shard_deadlines.commit_seconds = options.shard_deadlines.list_seconds = options.shard_deadlines.delete_seconds = 1;
    cluster = std::make_unique<Cluster>(store.get(), &registry, options);
    if (auto r = cluster->Recover(); !r.ok()) Fail("Recover: " + r.ToString());
    service = std::make_unique<CoordinatorService>(store.get(), cluster.get(), &registry);
    grpc::ServerBuilder b;
    b.RegisterService(service.get());
    server = b.BuildAndStart();
    if (!server) Fail("starting the in-process server");
    stub = v1::Coordinator::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  }
  ~World() {
    server->Shutdown(std::chrono::system_clock::now());  // ends the streams still open
    server->Wait();
    stub.reset();
    server.reset();
    service.reset();
    cluster.reset();
    store.reset();
  }
};

std::unique_ptr<grpc::ClientContext> Context(int ms = 2000) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(ms));
  return ctx;
}

template <typename M>
M Message(fuzz::Reader& in) {
  M m;
  if (!m.ParseFromString(in.Record())) m.Clear();
  return m;
}

// A job id: one of the first few the store hands out, or any string.
std::string JobId(fuzz::Reader& in) {
  const uint8_t b = in.U8();
  if (b < 0xf0) return absl::StrFormat("j-%06d", 1 + b % 8);
  return in.Record();
}

// A worker's attach stream, open until the end of the input.
struct Session {
  std::unique_ptr<grpc::ClientContext> ctx = Context(5000);
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>> stream;
  bool open = true;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Never destroyed at exit (a raw pointer): RocksDB's and gRPC's own statics may be gone by
  // then. Replaced every kInputsPerWorld inputs.
  static int inputs = 0, worlds = 0;
  static World* world = nullptr;
  if (world == nullptr || inputs++ % kInputsPerWorld == 0) {
    delete world;
    world = new World(worlds++);
  }
  World& w = *world;
  std::vector<Session> sessions;
  fuzz::Reader in(data, size);
  for (int ops = 0; !in.empty() && ops < 24; ++ops) {
    const uint8_t op = in.U8();
    const int arg = op >> 4;
    switch (op & 15) {
      case 0: {
        v1::SubmitJobRequest req;
        req.set_spec_yaml(in.Record());
        v1::SubmitJobResponse resp;
        auto ctx = Context();
        (void)w.stub->SubmitJob(ctx.get(), req, &resp);
        break;
      }
      case 1: {
        v1::GetJobRequest req;
        req.set_job_id(JobId(in));
        v1::Job resp;
        auto ctx = Context();
        (void)w.stub->GetJob(ctx.get(), req, &resp);
        break;
      }
      case 2:
      case 12:
      case 13:
      case 14:
      case 15: {
        v1::ListJobsRequest req = Message<v1::ListJobsRequest>(in);
        v1::ListJobsResponse resp;
        auto ctx = Context();
        (void)w.stub->ListJobs(ctx.get(), req, &resp);
        break;
      }
      case 3: {
        v1::CancelJobRequest req;
        req.set_job_id(JobId(in));
        v1::Job resp;
        auto ctx = Context();
        (void)w.stub->CancelJob(ctx.get(), req, &resp);
        break;
      }
      case 4: {  // the first event or none, then the watch is cancelled
        v1::WatchJobRequest req;
        req.set_job_id(JobId(in));
        req.set_from_seq(static_cast<int64_t>(in.U64()));
        auto ctx = Context(200);
        auto reader = w.stub->WatchJob(ctx.get(), req);
        v1::JobEvent e;
        if (arg & 1) (void)reader->Read(&e);
        ctx->TryCancel();
        while (reader->Read(&e)) {
        }
        (void)reader->Finish();
        break;
      }
      case 5: {
        v1::ListWorkersResponse workers;
        v1::ListShardServersResponse shards;
        auto c1 = Context(), c2 = Context();
        (void)w.stub->ListWorkers(c1.get(), v1::ListWorkersRequest(), &workers);
        (void)w.stub->ListShardServers(c2.get(), v1::ListShardServersRequest(), &shards);
        break;
      }
      case 6: {  // open an attach stream
        if (sessions.size() >= 3) break;
        Session s;
        s.stream = w.stub->Attach(s.ctx.get());
        sessions.push_back(std::move(s));
        break;
      }
      case 7: {  // a message on an open stream
        if (sessions.empty()) break;
        Session& s = sessions[arg % sessions.size()];
        v1::WorkerMessage m = Message<v1::WorkerMessage>(in);
        if (s.open && !s.stream->Write(m)) s.open = false;
        break;
      }
      case 8: {
        v1::RendezvousPutRequest req = Message<v1::RendezvousPutRequest>(in);
        v1::RendezvousPutResponse resp;
        auto ctx = Context();
        (void)w.stub->RendezvousPut(ctx.get(), req, &resp);
        break;
      }
      case 9: {  // a get waits at most 20 ms here (the server's own bound is 10 minutes)
        v1::RendezvousGetRequest req = Message<v1::RendezvousGetRequest>(in);
        req.set_wait_ms(req.wait_ms() % 21);
        v1::RendezvousGetResponse resp;
        auto ctx = Context(500);
        (void)w.stub->RendezvousGet(ctx.get(), req, &resp);
        break;
      }
      case 10: {  // shard servers at addresses that refuse at once (no name to resolve)
        v1::RegisterShardServerRequest req = Message<v1::RegisterShardServerRequest>(in);
        if (!req.address().empty()) req.set_address(absl::StrFormat("127.0.0.1:%d", 1 + arg));
        v1::RegisterShardServerResponse resp;
        auto ctx = Context();
        (void)w.stub->RegisterShardServer(ctx.get(), req, &resp);
        break;
      }
      case 11: {  // close a stream (the worker leaves)
        if (sessions.empty()) break;
        Session& s = sessions[arg % sessions.size()];
        if (s.open) {
          s.stream->WritesDone();
          s.open = false;
        }
        break;
      }
    }
  }
  for (Session& s : sessions) {
    if (s.open) s.stream->WritesDone();
    v1::CoordinatorMessage m;
    while (s.stream->Read(&m)) {
    }
    (void)s.stream->Finish();
  }
  return 0;
}
