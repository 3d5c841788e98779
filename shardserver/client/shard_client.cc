#include "common/security.h"
#include "shardserver/client/shard_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/executor.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/paging.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace gantry::shardserver {

namespace fs = std::filesystem;

namespace {
std::unique_ptr<v1::ShardServer::Stub> Stub(const std::string& address) {
  return v1::ShardServer::NewStub(MakeChannel(address));
}

v1::CommitRequest CommitRequestOf(const std::string& job_id, int64_t step, const std::vector<std::string>& parts,
                                  const std::string& manifest_json, const CheckpointOwner& owner) {
  v1::CommitRequest commit;
  commit.set_owner(owner.owner);
  commit.set_team(owner.team);
  commit.set_job_id(job_id);
  commit.set_step(step);
  for (const auto& p : parts) commit.add_parts(p);
  commit.set_manifest_json(manifest_json);
  return commit;
}
std::string CommitWhat(const std::string& address) { return absl::StrCat("committing checkpoint on ", address); }
std::string ListWhat(const std::string& address) { return absl::StrCat("listing checkpoints on ", address); }
std::string DeleteWhat(const std::string& address, const std::string& job_id, int64_t step) {
  return absl::StrCat("deleting checkpoint ", job_id, " step ", step, " on ", address);
}

// The servers' listings of one job (in `servers` order) as whole checkpoints, by step: a
// checkpoint counts when every file its manifest names is committed on some server. A
// listing that failed names its server in *unreachable.
std::vector<StoredCheckpoint> CombineListings(const std::vector<std::string>& servers,
                                              std::vector<absl::StatusOr<std::vector<v1::CheckpointInfo>>> lists,
                                              std::vector<std::string>* unreachable) {
  std::map<int64_t, StoredCheckpoint> by_step;
  for (size_t k = 0; k < servers.size(); ++k) {
    const std::string& server = servers[k];
    const auto& list = lists[k];
    if (!list.ok()) {
      if (unreachable) unreachable->push_back(absl::StrCat(server, " (", list.status().message(), ")"));
      continue;
    }
    for (const auto& info : *list) {
      StoredCheckpoint& c = by_step[info.step()];
      c.job_id = info.job_id();
      c.step = info.step();
      if (c.manifest_json.empty()) c.manifest_json = info.manifest_json();
      c.commit_time_unix_ms = std::max(c.commit_time_unix_ms, info.commit_time_unix_ms());
      c.bytes += info.bytes();
      c.servers.push_back(server);
      for (int i = 0; i < info.parts_size(); ++i) {
        c.files[info.parts(i)] = {server, i < info.part_bytes_size() ? info.part_bytes(i) : 0};
      }
    }
  }
  std::vector<StoredCheckpoint> out;
  for (auto& [step, c] : by_step) {
    // A Gantry checkpoint names its parts; it is whole when each is committed somewhere.
    nlohmann::json m = nlohmann::json::parse(c.manifest_json, nullptr, /*allow_exceptions=*/false);
    bool whole = true;
    if (m.is_object() && m.contains("parts") && m["parts"].is_array()) {
      std::vector<std::string> need = {"manifest.json", "config.json"};
      for (const auto& p : m["parts"]) need.push_back(p.is_string() ? p.get<std::string>() : std::string());
      for (const auto& n : need) whole = whole && c.files.count(n) != 0;
    }
    if (whole) out.push_back(std::move(c));
  }
  return out;
}

// One asynchronous call: what must live until its callback has run.
template <typename Req, typename Resp>
struct AsyncCall {
  AsyncCall(std::shared_ptr<v1::ShardServer::Stub> s, double deadline_seconds) : stub(std::move(s)) {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(deadline_seconds * 1000)));
  }
  std::shared_ptr<v1::ShardServer::Stub> stub;  // its channel stays up while the call runs
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
};
}  // namespace

absl::StatusOr<int64_t> UploadSources(const std::string& address, const std::string& job_id, int64_t step,
                                      const std::vector<std::pair<std::string, const ByteSource*>>& files) {
  auto stub = Stub(address);
  auto ctx = ContextWithDeadline(600);
  v1::WriteChunksResponse resp;
  auto writer = stub->WriteChunks(ctx.get(), &resp);
  absl::Status read;
  std::string buf;
  for (const auto& [part, source] : files) {
    const size_t size = source->size();
    size_t off = 0;
    bool open = true;
    do {
      const size_t n = std::min(kChunkBytes, size - off);
      buf.resize(n);
      read = source->ReadAt(off, n, buf.data());
      if (!read.ok()) break;
      v1::Chunk c;
      c.set_job_id(job_id);
      c.set_step(step);
      c.set_part(part);
      c.set_offset(static_cast<int64_t>(off));
      c.set_crc32c(Crc32c(buf.data(), n));
      c.set_data(std::move(buf));
      off += n;
      c.set_last(off >= size);
      open = writer->Write(c);  // false: the server ended the stream, and Finish() says why
    } while (open && off < size);
    if (!read.ok() || !open) break;
  }
  if (!read.ok()) ctx->TryCancel();  // nothing half-sent is committed: the part never completes
  writer->WritesDone();
  const absl::Status sent = FromGrpc(writer->Finish());
  RETURN_IF_ERROR(Annotate(read, "reading the checkpoint to send"));
  RETURN_IF_ERROR(Annotate(sent, absl::StrCat("writing checkpoint to ", address)));
  return resp.bytes();
}

absl::StatusOr<int64_t> UploadFiles(const std::string& address, const std::string& job_id, int64_t step,
                                    const std::string& dir, const std::vector<std::string>& files) {
  std::vector<std::shared_ptr<const ByteSource>> open;
  std::vector<std::pair<std::string, const ByteSource*>> sources;
  for (const auto& part : files) {
    ASSIGN_OR_RETURN(open.emplace_back(), OpenFileSource((fs::path(dir) / part).string()));
    sources.emplace_back(part, open.back().get());
  }
  return UploadSources(address, job_id, step, sources);
}

absl::Status CommitCheckpoint(const std::string& address, const std::string& job_id, int64_t step,
                              const std::vector<std::string>& parts, const std::string& manifest_json,
                              const CheckpointOwner& owner) {
  v1::CommitResponse cr;
  return Annotate(FromGrpc(Stub(address)->Commit(ContextWithDeadline(ShardDeadlines().Commit(parts.size())).get(),
                                                 CommitRequestOf(job_id, step, parts, manifest_json, owner), &cr)),
                  CommitWhat(address));
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
  std::vector<v1::CheckpointInfo> all;
  RETURN_IF_ERROR(ReadEveryPage<v1::ListCheckpointsResponse>(
      req,
      [&](const v1::ListCheckpointsRequest& r, v1::ListCheckpointsResponse* resp) {
        return Annotate(FromGrpc(stub->ListCheckpoints(ContextWithDeadline(ShardDeadlines().list_seconds).get(), r, resp)),
                        ListWhat(address));
      },
      [&](v1::ListCheckpointsResponse& resp) {
        for (auto& c : *resp.mutable_checkpoints()) all.push_back(std::move(c));
      }));
  return all;
}

// Streams bytes [offset, offset + length) of a committed part (length 0: to its end) into
// sink, checking each chunk's crc32c and that the chunks follow each other. Returns the
// bytes read.
absl::StatusOr<int64_t> ReadRange(v1::ShardServer::StubInterface& stub, const std::string& address,
                                  const std::string& job_id, int64_t step, const std::string& part, int64_t offset,
                                  int64_t length, const std::function<void(const std::string&)>& sink) {
  v1::ReadChunksRequest req;
  req.set_job_id(job_id);
  req.set_step(step);
  req.set_part(part);
  req.set_offset(offset);
  req.set_length(length);
  auto ctx = ContextWithDeadline(600);
  auto reader = stub.ReadChunks(ctx.get(), req);
  int64_t pos = offset;
  bool last = false;
  v1::Chunk c;
  absl::Status bad;
  while (bad.ok() && reader->Read(&c)) {
    if (c.offset() != pos) {
      bad = absl::DataLossError(absl::StrCat(part, ": chunk at offset ", c.offset(), ", expected ", pos));
    } else if (Crc32c(c.data().data(), c.data().size()) != c.crc32c()) {
      bad = absl::DataLossError(absl::StrCat(part, ": chunk at offset ", c.offset(), " fails its crc32c"));
    } else {
      sink(c.data());
      pos += static_cast<int64_t>(c.data().size());
      last = c.last();
    }
  }
  if (!bad.ok()) {
    ctx->TryCancel();
    while (reader->Read(&c)) {
    }
    (void)reader->Finish();
    return Annotate(bad, absl::StrCat("reading from ", address));
  }
  RETURN_IF_ERROR(Annotate(FromGrpc(reader->Finish()), absl::StrCat("reading ", part, " from ", address)));
  if (!last || (length > 0 && pos != offset + length)) {
    return absl::DataLossError(absl::StrCat(part, ": stream from ", address, " ended at byte ", pos, " before the last chunk"));
  }
  return pos - offset;
}

absl::Status ReadPartRange(v1::ShardServer::StubInterface& stub, const std::string& address, const std::string& job_id,
                           int64_t step, const std::string& part, int64_t offset, int64_t n, char* dst) {
  int64_t at = 0;
  return ReadRange(stub, address, job_id, step, part, offset, n, [&](const std::string& d) {
           const size_t k = std::min<size_t>(d.size(), static_cast<size_t>(n - at));  // the server sends no more
           std::memcpy(dst + at, d.data(), k);
           at += static_cast<int64_t>(k);
         })
      .status();
}

absl::Status DownloadCheckpoint(const std::string& address, const std::string& job_id, int64_t step,
                                const std::vector<std::string>& parts, const std::string& dir) {
  auto stub = Stub(address);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating ", dir, ": ", ec.message()));
  for (const auto& part : parts) {
    std::string bytes;
    RETURN_IF_ERROR(ReadRange(*stub, address, job_id, step, part, 0, 0, [&](const std::string& d) { bytes += d; }).status());
    RETURN_IF_ERROR(WriteFileAtomic((fs::path(dir) / part).string(), bytes));
  }
  return absl::OkStatus();
}

std::vector<StoredCheckpoint> ListStoredCheckpoints(const std::vector<std::string>& servers, const std::string& job_id,
                                                    std::vector<std::string>* unreachable) {
  std::vector<absl::StatusOr<std::vector<v1::CheckpointInfo>>> lists;
  for (const auto& server : servers) lists.push_back(ListCheckpoints(server, job_id));
  return CombineListings(servers, std::move(lists), unreachable);
}

std::shared_ptr<v1::ShardServer::Stub> ShardClients::StubFor(const std::string& address) {
  std::lock_guard<std::mutex> l(mu_);
  auto& stub = stubs_[address];
  // A shard server that restarts is reachable again within a second of its return (its
  // heartbeat period), as with the fresh connection each call used to make.
  if (!stub) stub = v1::ShardServer::NewStub(MakeChannel(address, 16 << 20, /*max_reconnect_backoff_ms=*/1000));
  return stub;
}

void ShardClients::Commit(const std::string& address, const std::string& job_id, int64_t step,
                          const std::vector<std::string>& parts, const std::string& manifest_json,
                          const CheckpointOwner& owner, Done done) {
  auto call = std::make_shared<AsyncCall<v1::CommitRequest, v1::CommitResponse>>(StubFor(address),
                                                                                 deadlines_.Commit(parts.size()));
  call->req = CommitRequestOf(job_id, step, parts, manifest_json, owner);
  call->stub->async()->Commit(&call->ctx, &call->req, &call->resp,
                              [call, address, done = std::move(done)](grpc::Status s) {
                                done(Annotate(FromGrpc(s), CommitWhat(address)));
                              });
}

void ShardClients::Delete(const std::string& address, const std::string& job_id, int64_t step, Done done) {
  auto call = std::make_shared<AsyncCall<v1::DeleteCheckpointRequest, v1::DeleteCheckpointResponse>>(
      StubFor(address), deadlines_.delete_seconds);
  call->req.set_job_id(job_id);
  call->req.set_step(step);
  call->stub->async()->DeleteCheckpoint(&call->ctx, &call->req, &call->resp,
                                        [call, address, job_id, step, done = std::move(done)](grpc::Status s) {
                                          done(Annotate(FromGrpc(s), DeleteWhat(address, job_id, step)));
                                        });
}

namespace {
// A server's checkpoints, page after page (each call's answer starts the next), then done.
void ListPages(std::shared_ptr<v1::ShardServer::Stub> stub, double deadline_s, const std::string& address,
               const std::string& job_id, const std::string& page_token,
               std::shared_ptr<std::vector<v1::CheckpointInfo>> so_far, ShardClients::Listed done) {
  auto call = std::make_shared<AsyncCall<v1::ListCheckpointsRequest, v1::ListCheckpointsResponse>>(stub, deadline_s);
  call->req.set_job_id(job_id);
  call->req.set_page_token(page_token);
  call->stub->async()->ListCheckpoints(
      &call->ctx, &call->req, &call->resp,
      [stub, deadline_s, call, address, job_id, so_far, done = std::move(done)](grpc::Status s) mutable {
        if (!s.ok()) {
          done(Annotate(FromGrpc(s), ListWhat(address)));
          return;
        }
        for (auto& c : *call->resp.mutable_checkpoints()) so_far->push_back(std::move(c));
        if (call->resp.next_page_token().empty()) {
          done(std::move(*so_far));
        } else {
          ListPages(stub, deadline_s, address, job_id, call->resp.next_page_token(), so_far, std::move(done));
        }
      });
}
}  // namespace

void ShardClients::List(const std::string& address, const std::string& job_id, Listed done) {
  ListPages(StubFor(address), deadlines_.list_seconds, address, job_id, "",
            std::make_shared<std::vector<v1::CheckpointInfo>>(), std::move(done));
}

void ShardClients::ListStored(const std::vector<std::string>& servers, const std::string& job_id, StoredListed done) {
  using Listing = absl::StatusOr<std::vector<v1::CheckpointInfo>>;
  auto all = Gather<Listing>::Make(servers.size(), [servers, done = std::move(done)](std::vector<Listing> lists) {
    std::vector<std::string> unreachable;
    auto stored = CombineListings(servers, std::move(lists), &unreachable);
    done(std::move(stored), std::move(unreachable));
  });
  for (size_t i = 0; i < servers.size(); ++i) List(servers[i], job_id, all->Slot(i));
}

}  // namespace gantry::shardserver
