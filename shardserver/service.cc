#include "shardserver/service.h"

#include "common/paging.h"

#include "common/authz.h"
#include "common/rpc_edge.h"

#include <glog/logging.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/grpc_util.h"
#include "common/kill_point.h"
#include "common/status.h"

namespace gantry::shardserver {
namespace {

constexpr size_t kMaxChunkBytes = 4 << 20;

std::string Base(const std::string& job, int64_t step) { return absl::StrFormat("%s/%012d", job, step); }
std::string ChunkPrefix(const std::string& job, int64_t step, const std::string& part) {
  return absl::StrCat("chunk/", Base(job, step), "/", part, "/");
}
std::string ChunkKey(const std::string& job, int64_t step, const std::string& part, int64_t off) {
  return absl::StrCat(ChunkPrefix(job, step, part), absl::StrFormat("%016d", off));
}
std::string PartKey(const std::string& job, int64_t step, const std::string& part) {
  return absl::StrCat("part/", Base(job, step), "/", part);
}
std::string CkptKey(const std::string& job, int64_t step) { return absl::StrCat("ckpt/", Base(job, step)); }

bool ValidName(const std::string& s) {
  return !s.empty() && s.size() < 256 && s.find("..") == std::string::npos &&
         s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/") == std::string::npos;
}

// The steps of a checkpoint on a shard server, each write between two kill points: a
// WriteChunks stream's batch (per rank), then at Commit the commit record. The checkpoint
// is committed on this server once its record is durable.
const KillPoint kChunksBeforeWrite("shard.write_chunks.before_write", KillPoint::kBeforeCommit,
                                   "a WriteChunks stream's chunks are received and checked; their batch is not written");
const KillPoint kChunksAfterWrite("shard.write_chunks.after_write", KillPoint::kBeforeCommit,
                                  "the stream's chunks and part sizes are durable, not committed; the reply is not sent");
const KillPoint kCommitBeforeRecord("shard.commit.before_record", KillPoint::kBeforeCommit,
                                    "Commit found every named part whole; the commit record is not written");
const KillPoint kCommitAfterRecord("shard.commit.after_record", KillPoint::kAfterCommit,
                                   "the commit record is durable; the reply is not sent");

// What authorisation knows of checkpoint (job, step): its job, and the owner and team its commit
// recorded (a checkpoint not committed, or committed before commits recorded them: no owner).
AuthzObject CheckpointObject(rocks::Db& db, const std::string& job, int64_t step) {
  v1::CheckpointInfo info;
  if (auto record = db.Get(CkptKey(job, step)); record.ok() && info.ParseFromString(*record)) {
    return AuthzObject::Job(job, info.owner(), info.team());
  }
  return AuthzObject::Job(job, "", "");
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One WriteChunks stream.
class WriteReactor : public grpc::ServerReadReactor<v1::Chunk> {
 public:
  WriteReactor(ShardService* svc, v1::WriteChunksResponse* resp) : svc_(svc), resp_(resp) { StartRead(&chunk_); }
  void OnReadDone(bool ok) override {
    if (!ok) {  // the client finished sending
      Finish(ToGrpc(End()));
      return;
    }
    if (absl::Status s = Take(); !s.ok()) {
      Finish(ToGrpc(s));
      return;
    }
    StartRead(&chunk_);
  }
  void OnDone() override { delete this; }

 private:
  absl::Status Take() {
    const v1::Chunk& c = chunk_;
    if (!ValidName(c.job_id()) || !ValidName(c.part()) || c.step() < 0) {
      return absl::InvalidArgumentError(absl::StrCat("chunk names an invalid job '", c.job_id(), "', part '", c.part(),
                                                     "' or step ", c.step()));
    }
    if (c.data().size() > kMaxChunkBytes) {
      return absl::InvalidArgumentError(absl::StrCat("chunk of ", c.data().size(), " bytes exceeds ", kMaxChunkBytes));
    }
    const uint32_t crc = Crc32c(c.data().data(), c.data().size());
    if (crc != c.crc32c()) {
      return absl::DataLossError(absl::StrFormat("chunk %s/%d/%s at offset %d: crc32c %08x, expected %08x",
                                                 c.job_id(), c.step(), c.part(), c.offset(), crc, c.crc32c()));
    }
    const std::string part = PartKey(c.job_id(), c.step(), c.part());
    int64_t& expect = next_offset_[part];
    if (done_.count(part)) return absl::InvalidArgumentError(absl::StrCat("part ", c.part(), ": chunk after the last one"));
    if (c.offset() != expect) {
      return absl::InvalidArgumentError(absl::StrCat("part ", c.part(), ": chunk at offset ", c.offset(), ", expected ", expect));
    }
    batch_.Put(ChunkKey(c.job_id(), c.step(), c.part(), c.offset()), c.data());
    expect += static_cast<int64_t>(c.data().size());
    bytes_ += static_cast<int64_t>(c.data().size());
    if (c.last()) {
      batch_.Put(part, std::to_string(expect));
      done_.insert(part);
    }
    return absl::OkStatus();
  }
  absl::Status End() {
    absl::Status s;
    if (next_offset_.size() != done_.size()) {
      s = absl::InvalidArgumentError("stream ended before the last chunk of a part");
    } else {
      kChunksBeforeWrite.Reach();
      s = Annotate(svc_->db().Write(batch_), "writing chunks");
      if (s.ok()) kChunksAfterWrite.Reach();
    }
    if (s.ok()) {
      resp_->set_bytes(bytes_);
      svc_->registry()->GetCounter("gantry_shardserver_checkpoint_written_bytes_total",
                                   "Checkpoint bytes written (rate() of it is the write throughput).").Increment(static_cast<double>(bytes_));
      svc_->UpdateStoredBytes();
    }
    return s;
  }

  ShardService* svc_;
  v1::WriteChunksResponse* resp_;
  v1::Chunk chunk_;
  rocks::Batch batch_;
  std::map<std::string, int64_t> next_offset_;
  std::set<std::string> done_;
  int64_t bytes_ = 0;
};

class ReadReactor : public grpc::ServerWriteReactor<v1::Chunk> {
 public:
  ReadReactor(ShardService* svc, const v1::ReadChunksRequest& req) : svc_(svc), req_(req) {
    if (auto info = svc_->db().Get(CkptKey(req.job_id(), req.step())); !info.ok()) {
      Finish(absl::IsNotFound(info.status())
                 ? grpc::Status(grpc::NOT_FOUND, absl::StrCat("no committed checkpoint of job ", req.job_id(), " at step ",
                                                              req.step()))
                 : ToGrpc(info.status()));
      return;
    }
    auto size = svc_->db().Get(PartKey(req.job_id(), req.step(), req.part()));
    if (!size.ok()) {
      Finish(absl::IsNotFound(size.status())
                 ? grpc::Status(grpc::NOT_FOUND, absl::StrCat("checkpoint has no part '", req.part(), "'"))
                 : ToGrpc(size.status()));
      return;
    }
    const int64_t part_size = std::stoll(*size);
    // Checked before the sum: offset + length of two large values overflows (found by
    // tests/fuzz/shard_chunks_fuzz: 2^62 + 2^62).
    if (req.offset() < 0 || req.length() < 0 || req.offset() > part_size || req.length() > part_size - req.offset()) {
      Finish(grpc::Status(grpc::OUT_OF_RANGE, absl::StrCat("bytes [", req.offset(), ", +", req.length(), ") of part '",
                                                           req.part(), "' are beyond its ", part_size)));
      return;
    }
    pos_ = req.offset();
    end_ = req.length() > 0 ? req.offset() + req.length() : part_size;
    it_ = svc_->db().NewCursor(ChunkPrefix(req.job_id(), req.step(), req.part()));
    it_->SeekForPrev(ChunkKey(req.job_id(), req.step(), req.part(), pos_));  // the chunk holding the first byte
    if (!it_->Valid()) it_->SeekToFirst();
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::CANCELLED, "client went away"));
      return;
    }
    if (pos_ >= end_) {
      Finish(grpc::Status::OK);
      return;
    }
    it_->Next();
    Next();
  }
  void OnDone() override { delete this; }

 private:
  // Sends the next stored chunk's share of [pos_, end_), or an empty last chunk for an
  // empty range.
  void Next() {
    out_.Clear();
    out_.set_job_id(req_.job_id());
    out_.set_step(req_.step());
    out_.set_part(req_.part());
    out_.set_offset(pos_);
    if (pos_ == end_) {
      out_.set_crc32c(Crc32c(nullptr, 0));
      out_.set_last(true);
      StartWrite(&out_);
      return;
    }
    for (; it_->Valid(); it_->Next()) {
      const int64_t at = std::stoll(std::string(it_->suffix()));
      const int64_t n = static_cast<int64_t>(it_->value().size());
      if (at > pos_) break;           // a hole: the store lost a chunk
      if (at + n <= pos_) continue;  // before the range
      const int64_t e = std::min(at + n, end_);
      out_.set_offset(pos_);
      out_.set_data(it_->value().data() + (pos_ - at), static_cast<size_t>(e - pos_));
      out_.set_crc32c(Crc32c(out_.data().data(), out_.data().size()));
      pos_ = e;
      out_.set_last(pos_ == end_);
      StartWrite(&out_);
      return;
    }
    if (auto s = it_->status(); !s.ok()) {
      Finish(ToGrpc(s));
      return;
    }
    Finish(grpc::Status(grpc::DATA_LOSS, absl::StrCat("part '", req_.part(), "' has no stored bytes at offset ", pos_)));
  }
  ShardService* svc_;
  v1::ReadChunksRequest req_;
  int64_t pos_ = 0, end_ = 0;
  std::unique_ptr<rocks::Cursor> it_;
  v1::Chunk out_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ShardService>> ShardService::Open(const std::string& dir, metrics::Registry* registry) {
  ASSIGN_OR_RETURN(std::unique_ptr<rocks::Db> db, rocks::Db::Open(dir));
  std::unique_ptr<ShardService> svc(new ShardService(std::move(db), registry));
  ASSIGN_OR_RETURN(int64_t reclaimed, svc->ReclaimUncommitted());
  if (reclaimed > 0) LOG(INFO) << "reclaimed " << reclaimed << " bytes of uncommitted checkpoint parts";
  svc->UpdateStoredBytes();
  return svc;
}

absl::StatusOr<int64_t> ShardService::ReclaimUncommitted() {
  // Parts written before a crash or restart whose checkpoint was never committed can no
  // longer be: their writers are gone (a later commit naming them finds them missing and is
  // refused). Their chunks are deleted, committed checkpoints are untouched.
  std::set<std::string> committed;  // "<job>/<step>"
  RETURN_IF_ERROR(db_->Scan("ckpt/", [&](absl::string_view key, absl::string_view) {
    committed.emplace(key.substr(5));
    return true;
  }));
  std::map<std::string, int64_t> orphans;  // "<job>/<step>" → bytes
  RETURN_IF_ERROR(db_->Scan("part/", [&](absl::string_view key, absl::string_view value) {
    const std::string rest(key.substr(5));  // <job>/<step, 12 digits>/<part>
    size_t cut = std::string::npos;
    for (size_t slash = rest.find('/'); slash != std::string::npos; slash = rest.find('/', slash + 1)) {
      if (slash + 13 < rest.size() && rest[slash + 13] == '/' &&
          rest.substr(slash + 1, 12).find_first_not_of("0123456789") == std::string::npos) {
        cut = slash + 13;
        break;
      }
    }
    if (cut == std::string::npos) return true;
    const std::string base = rest.substr(0, cut);
    if (!committed.count(base)) orphans[base] += std::atoll(std::string(value).c_str());
    return true;
  }));
  int64_t bytes = 0;
  rocks::Batch b;
  for (const auto& [base, n] : orphans) {
    b.DeletePrefix(absl::StrCat("chunk/", base, "/"));
    b.DeletePrefix(absl::StrCat("part/", base, "/"));
    bytes += n;
  }
  if (orphans.empty()) return 0;
  RETURN_IF_ERROR(Annotate(db_->Write(b), "reclaiming uncommitted parts"));
  registry_->GetCounter("gantry_shardserver_reclaimed_bytes_total", "Bytes of uncommitted checkpoint parts reclaimed at start.")
      .Increment(static_cast<double>(bytes));
  return bytes;
}

void ShardService::UpdateStoredBytes() {
  registry_->GetGauge("gantry_shardserver_stored_bytes", "Bytes of chunk data stored.").Set(static_cast<double>(bytes_stored()));
}

int64_t ShardService::bytes_stored() const {
  return static_cast<int64_t>(db_->IntProperty("rocksdb.estimate-live-data-size") +
                              db_->IntProperty("rocksdb.cur-size-all-mem-tables"));
}

grpc::ServerReadReactor<v1::Chunk>* ShardService::WriteChunks(grpc::CallbackServerContext* ctx, v1::WriteChunksResponse* resp) {
  using Reactor = grpc::ServerReadReactor<v1::Chunk>;
  return ServeStream<Reactor>(ctx, [&](const Principal& who) -> Reactor* {
    // The stream's chunks name their job; writing is the workers' whoever the job's owner.
    if (absl::Status s = Authorize(who, Action::kWriteCheckpoint, AuthzObject::Cluster()); !s.ok()) {
      return new Refused<Reactor>(ToGrpc(s));
    }
    return new WriteReactor(this, resp);
  });
}

grpc::ServerWriteReactor<v1::Chunk>* ShardService::ReadChunks(grpc::CallbackServerContext* ctx, const v1::ReadChunksRequest* req) {
  using Reactor = grpc::ServerWriteReactor<v1::Chunk>;
  return ServeStream<Reactor>(ctx, [&](const Principal& who) -> Reactor* {
    const AuthzObject object = CheckpointObject(*db_, req->job_id(), req->step());
    if (absl::Status s = Authorize(who, Action::kReadCheckpoint, object); !s.ok()) return new Refused<Reactor>(ToGrpc(s));
    return new ReadReactor(this, *req);
  });
}

grpc::ServerUnaryReactor* ShardService::Commit(grpc::CallbackServerContext* ctx, const v1::CommitRequest* req,
                                               v1::CommitResponse*) {
  return ServeUnary(ctx, [&](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kCommitCheckpoint, AuthzObject::Job(req->job_id(), req->owner(), req->team())));
    if (!ValidName(req->job_id()) || req->parts().empty()) return absl::InvalidArgumentError("commit needs a job and parts");
    v1::CheckpointInfo info;
    info.set_job_id(req->job_id());
    info.set_owner(req->owner());
    info.set_team(req->team());
    info.set_step(req->step());
    info.set_commit_time_unix_ms(NowMs());
    info.set_manifest_json(req->manifest_json());
    int64_t total = 0;
    for (const auto& part : req->parts()) {
      auto size = db_->Get(PartKey(req->job_id(), req->step(), part));
      if (absl::IsNotFound(size.status())) {
        return absl::FailedPreconditionError(absl::StrCat("part '", part, "' of ", req->job_id(), " step ", req->step(),
                                                          " is not fully written: nothing committed"));
      }
      if (!size.ok()) return size.status();
      total += std::stoll(*size);
      info.add_parts(part);
      info.add_part_bytes(std::stoll(*size));
    }
    info.set_bytes(total);
    kCommitBeforeRecord.Reach();
    RETURN_IF_ERROR(Annotate(db_->Put(CkptKey(req->job_id(), req->step()), info.SerializeAsString()), "committing"));
    kCommitAfterRecord.Reach();
    UpdateStoredBytes();
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ShardService::ListCheckpoints(grpc::CallbackServerContext* ctx,
                                                        const v1::ListCheckpointsRequest* req,
                                                        v1::ListCheckpointsResponse* resp) {
  return ServeUnary(ctx, [&](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kListCheckpoints,
                              req->job_id().empty() ? AuthzObject::Cluster() : AuthzObject::Job(req->job_id(), "", "")));
    const std::string prefix = req->job_id().empty() ? "ckpt/" : absl::StrCat("ckpt/", req->job_id(), "/");
    ASSIGN_OR_RETURN(const size_t size, PageSize(req->page_size()));
    std::string after;  // the last key of the previous page
    if (!req->page_token().empty()) {
      ASSIGN_OR_RETURN(after, PageTokenKey(req->page_token(), prefix));
    }
    // Only the checkpoints the caller may read: a listing of every job's passes over the
    // others; a listing of one job the caller may not read is refused.
    std::string last;
    absl::Status refused;
    v1::CheckpointInfo info;
    RETURN_IF_ERROR(db_->Scan(prefix, [&](absl::string_view key, absl::string_view value) {
      if (!after.empty() && key <= after) return true;
      if (!info.ParseFromArray(value.data(), static_cast<int>(value.size()))) return true;
      if (absl::Status s = Authorize(who, Action::kReadCheckpoint, AuthzObject::Job(info.job_id(), info.owner(), info.team()));
          !s.ok()) {
        if (req->job_id().empty()) return true;
        refused = s;
        return false;
      }
      if (static_cast<size_t>(resp->checkpoints_size()) == size) {  // another is left: a next page
        resp->set_next_page_token(PageToken(prefix, last));
        return false;
      }
      *resp->add_checkpoints() = info;
      last = std::string(key);
      return true;
    }));
    if (!refused.ok()) {
      resp->Clear();
      return refused;
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ShardService::DeleteCheckpoint(grpc::CallbackServerContext* ctx,
                                                         const v1::DeleteCheckpointRequest* req,
                                                         v1::DeleteCheckpointResponse*) {
  return ServeUnary(ctx, [&](const Principal& who) -> absl::Status {
    RETURN_IF_ERROR(Authorize(who, Action::kDeleteCheckpoint, CheckpointObject(*db_, req->job_id(), req->step())));
    rocks::Batch b;
    const std::string base = Base(req->job_id(), req->step());
    b.Delete(CkptKey(req->job_id(), req->step()));  // invisible first, in the same batch
    b.DeletePrefix(absl::StrCat("chunk/", base, "/"));
    b.DeletePrefix(absl::StrCat("part/", base, "/"));
    RETURN_IF_ERROR(Annotate(db_->Write(b), absl::StrCat("deleting checkpoint ", base)));
    UpdateStoredBytes();
    return absl::OkStatus();
  });
}

}  // namespace gantry::shardserver
