// A generic gRPC client for the integration tests (Debian ships no grpcurl):
//   grpc_probe health ADDR     exit 0 if grpc.health.v1.Health/Check answers SERVING
//   grpc_probe services ADDR   print the services listed by server reflection, one a line
//   grpc_probe badchunk ADDR   send a shard server a chunk whose crc32c is wrong: exit 0 if
//                              the stream is refused with DATA_LOSS, a commit of it fails and
//                              nothing of it is listed
//   grpc_probe submit ADDR FILE  SubmitJob with FILE's text as it is, past gantry submit's own
//                              check: print the job id, or "CODE: message" on stderr (exit 1)
// Messages are encoded by hand (they are tiny), through grpc::GenericStub.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "common/security.h"
#include "common/crc32c.h"
#include "gantry/v1/coordinator.grpc.pb.h"
#include "gantry/v1/shardserver.grpc.pb.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"

namespace {

grpc::ByteBuffer ToBuffer(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  (void)b.Dump(&slices);
  std::string out;
  for (auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// Reads a protobuf varint at pos.
uint64_t Varint(const std::string& s, size_t& pos) {
  uint64_t v = 0;
  for (int shift = 0; pos < s.size(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(s[pos++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  return v;
}

// Collects every length-delimited field, recursively, that looks like a service name.
void Strings(const std::string& s, int depth, std::vector<std::string>* out) {
  size_t pos = 0;
  while (pos < s.size()) {
    const uint64_t tag = Varint(s, pos);
    const int wire = static_cast<int>(tag & 7);
    if (wire == 0) {
      Varint(s, pos);
    } else if (wire == 2) {
      const uint64_t len = Varint(s, pos);
      if (pos + len > s.size()) return;
      const std::string sub = s.substr(pos, len);
      pos += len;
      if (depth < 3) Strings(sub, depth + 1, out);
      if (sub.find('.') != std::string::npos && sub.find_first_of(" \n\t") == std::string::npos &&
          sub.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._") ==
              std::string::npos) {
        out->push_back(sub);
      }
    } else {
      return;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 4 && std::string(argv[1]) == "submit")) {
    std::fprintf(stderr, "usage: grpc_probe health|services|badchunk ADDR, grpc_probe submit ADDR FILE\n");
    return 2;
  }
  const std::string what = argv[1];
  auto channel = gantry::MakeChannel(argv[2]);  // TLS and token from the environment, as the CLI
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  if (what == "health") {
    auto serving = gantry::CheckServing(argv[2]);
    if (!serving.ok()) {
      std::fprintf(stderr, "%s\n", std::string(serving.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", *serving ? "SERVING" : "NOT_SERVING");
    return *serving ? 0 : 1;
  }
  if (what == "services") {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto call = stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
    void* tag;
    bool ok;
    call->StartCall(reinterpret_cast<void*>(1));
    cq.Next(&tag, &ok);
    // ServerReflectionRequest{list_services (field 7) = ""}
    call->Write(ToBuffer(std::string("\x3a\x00", 2)), reinterpret_cast<void*>(2));
    cq.Next(&tag, &ok);
    grpc::ByteBuffer resp;
    call->Read(&resp, reinterpret_cast<void*>(3));
    cq.Next(&tag, &ok);
    if (!ok) {
      std::fprintf(stderr, "reflection: no answer\n");
      return 1;
    }
    std::vector<std::string> names;
    Strings(FromBuffer(resp), 0, &names);
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    for (const auto& n : names) std::printf("%s\n", n.c_str());
    call->WritesDone(reinterpret_cast<void*>(4));
    cq.Next(&tag, &ok);
    grpc::Status st;
    call->Finish(&st, reinterpret_cast<void*>(5));
    cq.Next(&tag, &ok);
    return names.empty() ? 1 : 0;
  }
  if (what == "submit") {
    std::ifstream in(argv[3]);
    std::stringstream text;
    text << in.rdbuf();
    gantry::v1::SubmitJobRequest req;
    req.set_spec_yaml(text.str());
    gantry::v1::SubmitJobResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status st = gantry::v1::Coordinator::NewStub(channel)->SubmitJob(&ctx, req, &resp);
    if (!st.ok()) {
      std::fprintf(stderr, "%s: %s\n",
                   absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code())).c_str(),
                   st.error_message().c_str());
      return 1;
    }
    std::printf("%s\n", resp.job_id().c_str());
    return 0;
  }
  if (what == "badchunk") {
    auto shard = gantry::v1::ShardServer::NewStub(channel);
    grpc::ClientContext ctx;
    gantry::v1::WriteChunksResponse resp;
    auto w = shard->WriteChunks(&ctx, &resp);
    gantry::v1::Chunk good, bad;
    good.set_job_id("j-probe");
    good.set_step(1);
    good.set_part("model.safetensors");
    good.set_data("first chunk, intact");
    good.set_crc32c(gantry::Crc32c(good.data().data(), good.data().size()));
    bad = good;
    bad.set_offset(static_cast<int64_t>(good.data().size()));
    bad.set_data("second chunk, flipped");
    bad.set_crc32c(gantry::Crc32c(bad.data().data(), bad.data().size()) ^ 1);
    bad.set_last(true);
    w->Write(good);
    w->Write(bad);
    w->WritesDone();
    auto st = w->Finish();
    std::printf("write: %d %s\n", st.error_code(), st.error_message().c_str());
    if (st.error_code() != grpc::DATA_LOSS) return 1;
    grpc::ClientContext c2;
    gantry::v1::CommitRequest commit;
    commit.set_job_id("j-probe");
    commit.set_step(1);
    commit.add_parts("model.safetensors");
    gantry::v1::CommitResponse cr;
    auto cs = shard->Commit(&c2, commit, &cr);
    std::printf("commit: %d %s\n", cs.error_code(), cs.error_message().c_str());
    if (cs.error_code() != grpc::FAILED_PRECONDITION) return 1;
    grpc::ClientContext c3;
    gantry::v1::ListCheckpointsRequest lr;
    lr.set_job_id("j-probe");
    gantry::v1::ListCheckpointsResponse list;
    auto ls = shard->ListCheckpoints(&c3, lr, &list);
    std::printf("listed: %d\n", list.checkpoints_size());
    return ls.ok() && list.checkpoints_size() == 0 ? 0 : 1;
  }
  std::fprintf(stderr, "grpc_probe: unknown command %s\n", what.c_str());
  return 2;
}
