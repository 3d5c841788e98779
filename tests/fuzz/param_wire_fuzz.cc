// Parameter-server mode's wire (shardserver/param_service.h): the data port's request
// header (common/param_wire.h, ParamWireHeader: magic, op, generation, step, offset, count,
// buffer, job_len) with its job id and payload, over real TCP to the data port, and the
// ParamServer gRPC methods (InitRange, WriteParams, PushGradients, ReadParams) over gRPC in
// this process. Each input starts from a fresh range of job j-000001 (generation 1, flat
// [1024, 3072), step 0), then runs a program: each operation is one byte (its low 3 bits
// the operation, the others its flags and counts), then its fields or messages (records: a 16-bit length and the bytes; protobuf bytes that do not parse
// leave the message empty).
//
// Data port requests come two ways: raw bytes as sent, or a header built from fields with
// the magic and (optionally) the job right, so that the checks behind them are reached.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "common/metrics.h"
#include "common/param_wire.h"
#include "common/stream_client.h"
#include "gantry/v1/shardserver.grpc.pb.h"
#include "shardserver/param_service.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace gantry;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "param_wire_fuzz: %s\n", what.c_str());
  std::abort();
}

constexpr int64_t kBegin = 1024, kEnd = 3072;
const char* const kJobs[4] = {"j-000001", "j-000002", "j-000003", ""};

struct World {
  metrics::Registry registry;
  shardserver::ParamService service{&registry};
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::ParamServer::Stub> stub;
  std::string data_address;
  World() {
    // Protobuf logs every string field of invalid UTF-8 it refuses to parse; the inputs
    // make such fields all the time, and the log would bury the fuzzer's.
    google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    grpc::ServerBuilder b;
    b.RegisterService(&service);
    server = b.BuildAndStart();
    if (!server) Fail("starting the in-process server");
    stub = v1::ParamServer::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
    // Deadlines short enough that an input which stops half-way through a request (and so
    // waits for bytes that never come) costs a second, not the default half minute.
    net::StreamServer::Options options;
    options.message_timeout = std::chrono::milliseconds(1000);
    auto addr = service.StartDataPort("127.0.0.1", options);
    if (!addr.ok()) Fail("starting the data port: " + addr.status().ToString());
    data_address = *addr;
  }
};

World& TheWorld() {
  static World* w = new World();  // never destroyed: its threads outlive main's statics
  return *w;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return ctx;
}

void InitRange(World& w, v1::InitRangeRequest req) {
  v1::InitRangeResponse resp;
  auto ctx = Context();
  (void)w.stub->InitRange(ctx.get(), req, &resp);
}

template <typename M>
M Message(fuzz::Reader& in) {
  M m;
  if (!m.ParseFromString(in.Record())) m.Clear();
  return m;
}

// One connection to the data port: the bytes sent, the write side closed, every reply read
// to the end (the server closes the connection once it has read all there is).
void DataSession(World& w, const std::string& bytes) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto c = net::StreamClient::Connect(w.data_address, deadline);
  if (!c.ok()) Fail("connecting to the data port: " + c.status().ToString());
  (void)(*c)->Send({{bytes.data(), bytes.size()}}, deadline);  // the server may close early: fine
  (*c)->CloseSend();
  char buf[1 << 14];
  for (;;) {
    auto got = (*c)->ReceiveSome(buf, sizeof(buf), deadline);
    if (!got.ok()) Fail("the data port neither answered nor closed: " + got.status().ToString());
    if (*got == 0) break;
  }
}

// A request built from fields: magic right, the job j-000001 and its length right when
// `real_job`, the payload as given.
std::string BuiltRequest(fuzz::Reader& in, bool real_job) {
  net::ParamWireHeader h;
  h.op = in.U8() % 5;  // 1-3 and two unknown ones
  h.generation = real_job ? 1 : static_cast<int64_t>(in.U64());
  h.step = static_cast<int64_t>(in.U8()) - 8;
  const uint64_t lr_bits = in.U64();
  std::memcpy(&h.lr, &lr_bits, sizeof(h.lr));
  h.offset = kBegin + static_cast<int16_t>(in.U16());
  h.count = static_cast<int64_t>(static_cast<int32_t>(in.U32()));
  h.buffer = in.U8() % 4;
  const std::string job = real_job ? std::string(kJobs[0]) : in.Record();
  h.job_len = real_job ? static_cast<uint32_t>(job.size()) : in.U32() % 5000;
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out += job;
  out += in.Record();  // the payload: as many bytes as given, whatever count says
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = TheWorld();
  {
    v1::InitRangeRequest req;
    req.set_job_id(kJobs[0]);
    req.set_generation(1);
    req.mutable_range()->set_begin(kBegin);
    req.mutable_range()->set_end(kEnd);
    req.set_beta1(0.9);
    req.set_beta2(0.95);
    req.set_eps(1e-8);
    req.set_weight_decay(0.1);
    auto* d = req.add_decay();
    d->set_begin(kBegin);
    d->set_end(2048);
    InitRange(w, req);
  }
  fuzz::Reader in(data, size);
  for (int ops = 0; !in.empty() && ops < 8; ++ops) {
    const uint8_t op = in.U8();
    switch (op & 7) {
      case 0:
      case 6:
      case 7:  // raw bytes to the data port
        DataSession(w, in.Record());
        break;
      case 1: {  // up to 4 built requests on one connection
        std::string bytes;
        // bits 3-4: requests - 1; bit 7: the job and generation as the input says
        for (int i = 0, n = 1 + ((op >> 3) & 3); i < n; ++i) bytes += BuiltRequest(in, (op & 0x80) == 0);
        DataSession(w, bytes);
        break;
      }
      case 2: {
        // A range for one of a few jobs (so that the ranges kept stay few). Sizes up to 2^16
        // elements go as asked, and absurd ones too (a server must refuse what it cannot
        // hold, not die allocating it); sizes in between, which a real server holds, are cut
        // to 2^16 so that the fuzzer's memory limit measures the server, not the request.
        v1::InitRangeRequest req = Message<v1::InitRangeRequest>(in);
        req.set_job_id(kJobs[(op >> 5) & 3]);  // bits 5-6
        const int64_t b = req.range().begin(), e = req.range().end();
        if (e > b && b >= 0 && e - b > (1 << 16) && e - b < (int64_t{1} << 44)) {
          req.mutable_range()->set_end(b + (e - b) % (1 << 16) + 1);
        }
        InitRange(w, req);
        break;
      }
      case 3: {
        v1::ParamsChunk req = Message<v1::ParamsChunk>(in);
        v1::ParamsAck resp;
        auto ctx = Context();
        (void)w.stub->WriteParams(ctx.get(), req, &resp);
        break;
      }
      case 4: {
        v1::GradientChunk req = Message<v1::GradientChunk>(in);
        v1::PushAck resp;
        auto ctx = Context();
        (void)w.stub->PushGradients(ctx.get(), req, &resp);
        break;
      }
      case 5: {
        v1::ReadParamsRequest req = Message<v1::ReadParamsRequest>(in);
        v1::ParamsChunk resp;
        auto ctx = Context();
        (void)w.stub->ReadParams(ctx.get(), req, &resp);
        break;
      }
    }
  }
  return 0;
}
