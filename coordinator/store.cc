#include "coordinator/store.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace gantry::coordinator {
namespace {

// Keys: "job/<id>" → Job, "event/<id>/<seq, 12 digits>" → JobEvent, "meta/next_job" → int.
std::string JobKey(const std::string& id) { return "job/" + id; }
std::string EventKey(const std::string& id, int64_t seq) {
  return absl::StrFormat("event/%s/%012d", id, seq);
}

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrCat(what, ": not found"));
  return absl::UnavailableError(absl::StrCat(what, ": ", s.ToString()));
}

rocksdb::WriteOptions Synced() {
  rocksdb::WriteOptions w;
  w.sync = true;
  return w;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& dir) {
  rocksdb::Options o;
  o.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  auto s = rocksdb::DB::Open(o, dir, &db);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("opening store ", dir, ": ", s.ToString()));
  return std::unique_ptr<Store>(new Store(db));
}

Store::~Store() { delete db_; }

absl::StatusOr<std::string> Store::CreateJob(v1::Job job) {
  std::lock_guard<std::mutex> l(mu_);
  std::string next;
  int64_t n = 1;
  auto s = db_->Get(rocksdb::ReadOptions(), "meta/next_job", &next);
  if (s.ok()) {
    n = std::stoll(next);
  } else if (!s.IsNotFound()) {
    return FromRocks(s, "reading the job counter");
  }
  job.set_id(absl::StrFormat("j-%06d", n));
  rocksdb::WriteBatch b;
  b.Put("meta/next_job", std::to_string(n + 1));
  b.Put(JobKey(job.id()), job.SerializeAsString());
  auto w = db_->Write(Synced(), &b);
  if (!w.ok()) return FromRocks(w, "writing job");
  return job.id();
}

absl::Status Store::PutJob(const v1::Job& job, bool sync) {
  return FromRocks(db_->Put(sync ? Synced() : rocksdb::WriteOptions(), JobKey(job.id()), job.SerializeAsString()),
                   "writing job " + job.id());
}

absl::StatusOr<v1::Job> Store::GetJob(const std::string& id) const {
  std::string v;
  auto s = db_->Get(rocksdb::ReadOptions(), JobKey(id), &v);
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  if (!s.ok()) return FromRocks(s, "reading job " + id);
  v1::Job job;
  if (!job.ParseFromString(v)) return absl::DataLossError(absl::StrCat("job ", id, ": stored record is corrupt"));
  return job;
}

absl::StatusOr<std::vector<v1::Job>> Store::ListJobs() const {
  std::vector<v1::Job> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("job/"); it->Valid() && it->key().starts_with("job/"); it->Next()) {
    v1::Job job;
    if (!job.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError(absl::StrCat("stored job ", it->key().ToString(), " is corrupt"));
    }
    out.push_back(std::move(job));
  }
  if (!it->status().ok()) return FromRocks(it->status(), "listing jobs");
  return out;
}

absl::StatusOr<int64_t> Store::AppendEvent(v1::JobEvent event, bool sync) {
  std::lock_guard<std::mutex> l(mu_);
  auto [next, fresh] = next_seq_.try_emplace(event.job_id(), 1);
  if (fresh) {  // first event of this job since the store opened: continue after the last stored
    const std::string prefix = absl::StrCat("event/", event.job_id(), "/");
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    it->SeekForPrev(prefix + "~");
    if (it->Valid() && it->key().starts_with(prefix)) {
      next->second = std::stoll(it->key().ToString().substr(prefix.size())) + 1;
    }
  }
  const int64_t seq = next->second;
  event.set_seq(seq);
  auto s = db_->Put(sync ? Synced() : rocksdb::WriteOptions(), EventKey(event.job_id(), seq), event.SerializeAsString());
  if (!s.ok()) return FromRocks(s, "writing event");
  ++next->second;
  return seq;
}

absl::StatusOr<std::vector<v1::JobEvent>> Store::Events(const std::string& job_id, int64_t from_seq,
                                                        size_t limit) const {
  std::vector<v1::JobEvent> out;
  const std::string prefix = absl::StrCat("event/", job_id, "/");
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(EventKey(job_id, std::max<int64_t>(from_seq, 1))); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    if (limit > 0 && out.size() >= limit) break;
    v1::JobEvent e;
    if (!e.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError(absl::StrCat("stored event ", it->key().ToString(), " is corrupt"));
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace gantry::coordinator
