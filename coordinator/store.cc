#include "coordinator/store.h"

#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace gantry::coordinator {
namespace {

// Keys: "job/<id>" → Job, "event/<id>/<seq, 12 digits>" → JobEvent, "meta/next_job" → int.
std::string JobKey(const std::string& id) { return "job/" + id; }
std::string EventPrefix(const std::string& id) { return absl::StrCat("event/", id, "/"); }
std::string EventKey(const std::string& id, int64_t seq) { return absl::StrFormat("%s%012d", EventPrefix(id), seq); }
constexpr char kNextJobKey[] = "meta/next_job";

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& dir) {
  ASSIGN_OR_RETURN(std::unique_ptr<rocks::Db> db, rocks::Db::Open(dir));
  return std::unique_ptr<Store>(new Store(std::move(db)));
}

absl::StatusOr<std::string> Store::CreateJob(v1::Job job) {
  std::lock_guard<std::mutex> l(mu_);
  int64_t n = 1;
  auto next = db_->Get(kNextJobKey);
  if (next.ok()) {
    if (!absl::SimpleAtoi(*next, &n)) {
      return absl::DataLossError(absl::StrCat("store ", db_->path(), ": the job counter '", *next, "' is not a number"));
    }
  } else if (!absl::IsNotFound(next.status())) {
    return next.status();
  }
  job.set_id(absl::StrFormat("j-%06d", n));
  rocks::Batch b;
  b.Put(kNextJobKey, std::to_string(n + 1));
  b.Put(JobKey(job.id()), job.SerializeAsString());
  RETURN_IF_ERROR(db_->Write(b));
  return job.id();
}

absl::Status Store::PutJob(const v1::Job& job, bool sync) {
  return db_->Put(JobKey(job.id()), job.SerializeAsString(), sync);
}

absl::StatusOr<v1::Job> Store::GetJob(const std::string& id) const {
  auto v = db_->Get(JobKey(id));
  if (absl::IsNotFound(v.status())) return absl::NotFoundError(absl::StrCat("job ", id, " not found"));
  if (!v.ok()) return v.status();
  v1::Job job;
  if (!job.ParseFromString(*v)) return absl::DataLossError(absl::StrCat("job ", id, ": stored record is corrupt"));
  return job;
}

absl::StatusOr<std::vector<v1::Job>> Store::ListJobs() const {
  std::vector<v1::Job> out;
  absl::Status bad;
  RETURN_IF_ERROR(db_->Scan("job/", [&](absl::string_view key, absl::string_view value) {
    v1::Job job;
    if (!job.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      bad = absl::DataLossError(absl::StrCat("stored job ", key, " is corrupt"));
      return false;
    }
    out.push_back(std::move(job));
    return true;
  }));
  RETURN_IF_ERROR(bad);
  return out;
}

absl::StatusOr<int64_t> Store::AppendEvent(v1::JobEvent event, bool sync) {
  std::lock_guard<std::mutex> l(mu_);
  auto [next, fresh] = next_seq_.try_emplace(event.job_id(), 1);
  if (fresh) {  // first event of this job since the store opened: continue after the last stored
    auto last = db_->NewCursor(EventPrefix(event.job_id()));
    last->SeekToLast();
    int64_t seq = 0;
    if (last->Valid() && absl::SimpleAtoi(last->suffix(), &seq)) next->second = seq + 1;
    if (auto s = last->status(); !s.ok()) {
      next_seq_.erase(next);
      return s;
    }
  }
  const int64_t seq = next->second;
  event.set_seq(seq);
  RETURN_IF_ERROR(db_->Put(EventKey(event.job_id(), seq), event.SerializeAsString(), sync));
  ++next->second;
  return seq;
}

absl::StatusOr<std::vector<v1::JobEvent>> Store::Events(const std::string& job_id, int64_t from_seq,
                                                        size_t limit) const {
  std::vector<v1::JobEvent> out;
  auto it = db_->NewCursor(EventPrefix(job_id));
  for (it->Seek(EventKey(job_id, std::max<int64_t>(from_seq, 1))); it->Valid(); it->Next()) {
    if (limit > 0 && out.size() >= limit) break;
    v1::JobEvent e;
    if (!e.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError(absl::StrCat("stored event ", it->key(), " is corrupt"));
    }
    out.push_back(std::move(e));
  }
  RETURN_IF_ERROR(it->status());
  return out;
}

}  // namespace gantry::coordinator
