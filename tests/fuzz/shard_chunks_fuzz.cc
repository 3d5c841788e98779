// The shard server's checkpoint chunk framing (shardserver/service.h), on both sides of the
// wire, over gRPC on loopback in this process:
//   - the server: WriteChunks streams of arbitrary Chunk messages (names, steps, offsets,
//     sizes, the last flag; the crc32c made right or left as sent), then Commit, ReadChunks
//     of arbitrary ranges, ListCheckpoints and DeleteCheckpoint, against a real ShardService
//     on a RocksDB store;
//   - the client: shardserver::ReadPartRange (what a rank reading a checkpoint from the shard
//     servers runs) against a server that answers ReadChunks with arbitrary chunks.
// The input is a program: each operation is one byte (its low 3 bits the operation, the
// others its flags and counts), then its messages as records (a 16-bit length and the
// message's protobuf bytes, parsed with ParseFromString; bytes that do not parse leave the
// message empty). The store is emptied before each input, so an
// input's outcome does not depend on the ones before it.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "common/metrics.h"
#include "gantry/v1/shardserver.grpc.pb.h"
#include "shardserver/client/shard_client.h"
#include "shardserver/service.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using namespace gantry;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "shard_chunks_fuzz: %s\n", what.c_str());
  std::abort();
}

// A shard server that answers ReadChunks with the chunks it is given (a corrupt or hostile
// server, as the client must expect one).
class ScriptedServer final : public v1::ShardServer::Service {
 public:
  void Set(std::vector<v1::Chunk> chunks, grpc::Status end) {
    std::lock_guard<std::mutex> l(mu_);
    chunks_ = std::move(chunks);
    end_ = std::move(end);
  }
  grpc::Status ReadChunks(grpc::ServerContext*, const v1::ReadChunksRequest*,
                          grpc::ServerWriter<v1::Chunk>* writer) override {
    std::lock_guard<std::mutex> l(mu_);
    for (const v1::Chunk& c : chunks_) {
      if (!writer->Write(c)) break;
    }
    return end_;
  }

 private:
  std::mutex mu_;
  std::vector<v1::Chunk> chunks_;
  grpc::Status end_;
};

struct World {
  metrics::Registry registry;
  std::unique_ptr<shardserver::ShardService> service;
  ScriptedServer scripted;
  std::unique_ptr<grpc::Server> server, scripted_server;
  std::unique_ptr<v1::ShardServer::Stub> stub, scripted_stub;
  World() {
    // Protobuf logs every string field of invalid UTF-8 it refuses to parse; the inputs
    // make such fields all the time, and the log would bury the fuzzer's.
    google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
    auto svc = shardserver::ShardService::Open(fuzz::ScratchDir() + "/db", &registry);
    if (!svc.ok()) Fail("opening the store: " + svc.status().ToString());
    service = std::move(*svc);
    // Over TCP on loopback, as the shard server is reached. Not gRPC's in-process transport:
    // in Debian's gRPC (1.51) it kept WriteChunks calls, client and server side, after both
    // had finished (1.5 GB live after 27,000 inputs, every byte of it gRPC's call objects);
    // over loopback, 7,000 inputs of the same corpus end at 146 MB of resident memory.
    grpc::ServerBuilder b;
    int port = 0, scripted_port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(service.get());
    server = b.BuildAndStart();
    grpc::ServerBuilder sb;
    sb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &scripted_port);
    sb.RegisterService(&scripted);
    scripted_server = sb.BuildAndStart();
    if (!server || !scripted_server || port == 0 || scripted_port == 0) Fail("starting the servers");
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(16 << 20);
    stub = v1::ShardServer::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials(), args));
    scripted_stub = v1::ShardServer::NewStub(
        grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", scripted_port), grpc::InsecureChannelCredentials(), args));
  }
  // Point deletes of what the last input wrote, not DeletePrefix: range tombstones pile up
  // in the memtable, one set per input, and every read walks them (the fuzzer slowed from
  // hundreds of inputs a second to tens).
  void Reset() {
    rocks::Batch b;
    int keys = 0;
    for (const char* prefix : {"chunk/", "part/", "ckpt/"}) {
      (void)service->db().Scan(prefix, [&](absl::string_view key, absl::string_view) {
        b.Delete(key);
        ++keys;
        return true;
      });
    }
    if (keys > 0 && !service->db().Write(b, /*sync=*/false).ok()) Fail("emptying the store");
  }
};

World& TheWorld() {
  static World* w = new World();  // never destroyed: gRPC's threads outlive main's statics
  return *w;
}

template <typename M>
M Message(fuzz::Reader& in) {
  M m;
  if (!m.ParseFromString(in.Record())) m.Clear();
  return m;
}

// A chunk from the input; with fix_crc its crc32c is made right, so that the checks after
// the checksum are reached (a fuzzer finds a CRC by chance only once in 2^32).
v1::Chunk ChunkOf(fuzz::Reader& in, bool fix_crc) {
  v1::Chunk c = Message<v1::Chunk>(in);
  if (fix_crc) c.set_crc32c(Crc32c(c.data().data(), c.data().size()));
  return c;
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = TheWorld();
  w.Reset();
  fuzz::Reader in(data, size);
  for (int ops = 0; !in.empty() && ops < 16; ++ops) {
    const uint8_t op = in.U8();
    const bool fix_crc = (op & 0x08) == 0;  // bit 3: send the crc32c as given
    const int count = (op >> 4) & 7;       // bits 4-6
    switch (op & 7) {
      case 0: {  // a WriteChunks stream of up to 8 chunks
        const int n = 1 + count;
        v1::WriteChunksResponse resp;
        auto ctx = Context();
        auto writer = w.stub->WriteChunks(ctx.get(), &resp);
        for (int i = 0; i < n; ++i) {
          if (!writer->Write(ChunkOf(in, fix_crc))) break;
        }
        writer->WritesDone();
        (void)writer->Finish();
        break;
      }
      case 1: {
        v1::CommitRequest req = Message<v1::CommitRequest>(in);
        v1::CommitResponse resp;
        auto ctx = Context();
        (void)w.stub->Commit(ctx.get(), req, &resp);
        break;
      }
      case 2: {  // a ranged read, chunk by chunk, each checked as the client checks them
        v1::ReadChunksRequest req = Message<v1::ReadChunksRequest>(in);
        auto ctx = Context();
        auto reader = w.stub->ReadChunks(ctx.get(), req);
        v1::Chunk c;
        int64_t pos = req.offset();
        while (reader->Read(&c)) {
          if (c.offset() != pos) Fail("the server sent a chunk out of order");
          if (Crc32c(c.data().data(), c.data().size()) != c.crc32c()) Fail("the server sent a chunk with a bad crc32c");
          pos += static_cast<int64_t>(c.data().size());
        }
        (void)reader->Finish();
        break;
      }
      case 3:
      case 6:
      case 7: {
        v1::ListCheckpointsRequest req = Message<v1::ListCheckpointsRequest>(in);
        v1::ListCheckpointsResponse resp;
        auto ctx = Context();
        (void)w.stub->ListCheckpoints(ctx.get(), req, &resp);
        break;
      }
      case 4: {
        v1::DeleteCheckpointRequest req = Message<v1::DeleteCheckpointRequest>(in);
        v1::DeleteCheckpointResponse resp;
        auto ctx = Context();
        (void)w.stub->DeleteCheckpoint(ctx.get(), req, &resp);
        break;
      }
      case 5: {  // the client reading [offset, offset + n) from a server that sends these chunks
        const int n = count;
        const int64_t offset = static_cast<int64_t>(in.U32() & 0xffff);
        const int64_t length = static_cast<int64_t>(in.U16());
        std::vector<v1::Chunk> chunks;
        for (int i = 0; i < n; ++i) chunks.push_back(ChunkOf(in, fix_crc));
        w.scripted.Set(std::move(chunks), (op & 0x80) ? grpc::Status(grpc::DATA_LOSS, "scripted") : grpc::Status::OK);
        std::string dst(static_cast<size_t>(length), '\0');
        (void)shardserver::ReadPartRange(*w.scripted_stub, "scripted", "j-000001", 10, "part-00000.safetensors", offset,
                                   length, dst.data());
        break;
      }
    }
  }
  return 0;
}
