#include "worker/agent/shard_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/status.h"

namespace gantry::agent {

namespace fs = std::filesystem;

namespace {
std::unique_ptr<v1::ShardServer::Stub> Stub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  return v1::ShardServer::NewStub(grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}
}  // namespace

absl::StatusOr<int64_t> UploadFiles(const std::string& address, const std::string& job_id, int64_t step,
                                    const std::string& dir, const std::vector<std::string>& files) {
  auto stub = Stub(address);
  auto ctx = ContextWithDeadline(600);
  v1::WriteChunksResponse resp;
  auto writer = stub->WriteChunks(ctx.get(), &resp);
  for (const auto& part : files) {
    ASSIGN_OR_RETURN(std::string bytes, ReadFileToString((fs::path(dir) / part).string()));
    size_t off = 0;
    do {
      const size_t n = std::min(kChunkBytes, bytes.size() - off);
      v1::Chunk c;
      c.set_job_id(job_id);
      c.set_step(step);
      c.set_part(part);
      c.set_offset(static_cast<int64_t>(off));
      c.set_data(bytes.data() + off, n);
      c.set_crc32c(Crc32c(bytes.data() + off, n));
      off += n;
      c.set_last(off >= bytes.size());
      if (!writer->Write(c)) break;  // the server ended the stream: Finish() says why
    } while (off < bytes.size());
  }
  writer->WritesDone();
  RETURN_IF_ERROR(Annotate(FromGrpc(writer->Finish()), absl::StrCat("writing checkpoint to ", address)));
  return resp.bytes();
}

absl::Status CommitCheckpoint(const std::string& address, const std::string& job_id, int64_t step,
                              const std::vector<std::string>& parts, const std::string& manifest_json) {
  v1::CommitRequest commit;
  commit.set_job_id(job_id);
  commit.set_step(step);
  for (const auto& p : parts) commit.add_parts(p);
  commit.set_manifest_json(manifest_json);
  v1::CommitResponse cr;
  return Annotate(FromGrpc(Stub(address)->Commit(ContextWithDeadline(30).get(), commit, &cr)),
                  absl::StrCat("committing checkpoint on ", address));
}

absl::Status DeleteCheckpoint(const std::string& address, const std::string& job_id, int64_t step) {
  v1::DeleteCheckpointRequest req;
  req.set_job_id(job_id);
  req.set_step(step);
  v1::DeleteCheckpointResponse resp;
  return Annotate(FromGrpc(Stub(address)->DeleteCheckpoint(ContextWithDeadline(30).get(), req, &resp)),
                  absl::StrCat("deleting checkpoint ", job_id, " step ", step, " on ", address));
}

absl::StatusOr<int64_t> UploadCheckpoint(const std::string& address, const std::string& job_id, int64_t step,
                                         const std::string& dir, const std::string& manifest_json) {
  std::vector<std::string> parts;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file()) parts.push_back(e.path().filename().string());
  }
  if (ec || parts.empty()) return absl::NotFoundError(absl::StrCat("checkpoint directory ", dir, " is empty or unreadable"));
  std::sort(parts.begin(), parts.end());
  ASSIGN_OR_RETURN(int64_t bytes, UploadFiles(address, job_id, step, dir, parts));
  RETURN_IF_ERROR(CommitCheckpoint(address, job_id, step, parts, manifest_json));
  return bytes;
}

absl::StatusOr<std::vector<v1::CheckpointInfo>> ListCheckpoints(const std::string& address, const std::string& job_id) {
  auto stub = Stub(address);
  v1::ListCheckpointsRequest req;
  req.set_job_id(job_id);
  v1::ListCheckpointsResponse resp;
  RETURN_IF_ERROR(Annotate(FromGrpc(stub->ListCheckpoints(ContextWithDeadline(10).get(), req, &resp)),
                           absl::StrCat("listing checkpoints on ", address)));
  return std::vector<v1::CheckpointInfo>(resp.checkpoints().begin(), resp.checkpoints().end());
}

absl::Status DownloadCheckpoint(const std::string& address, const std::string& job_id, int64_t step,
                                const std::vector<std::string>& parts, const std::string& dir) {
  auto stub = Stub(address);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating ", dir, ": ", ec.message()));
  for (const auto& part : parts) {
    v1::ReadChunksRequest req;
    req.set_job_id(job_id);
    req.set_step(step);
    req.set_part(part);
    auto ctx = ContextWithDeadline(600);
    auto reader = stub->ReadChunks(ctx.get(), req);
    std::string bytes;
    v1::Chunk c;
    bool last = false;
    while (reader->Read(&c)) {
      if (static_cast<size_t>(c.offset()) != bytes.size()) {
        return absl::DataLossError(absl::StrCat(part, ": chunk at offset ", c.offset(), ", expected ", bytes.size()));
      }
      if (Crc32c(c.data().data(), c.data().size()) != c.crc32c()) {
        return absl::DataLossError(absl::StrCat(part, ": chunk at offset ", c.offset(), " fails its crc32c"));
      }
      bytes += c.data();
      last = c.last();
    }
    RETURN_IF_ERROR(Annotate(FromGrpc(reader->Finish()), absl::StrCat("reading ", part, " from ", address)));
    if (!last) return absl::DataLossError(absl::StrCat(part, ": stream ended before the last chunk"));
    RETURN_IF_ERROR(WriteFileAtomic((fs::path(dir) / part).string(), bytes));
  }
  return absl::OkStatus();
}

}  // namespace gantry::agent
