#include "coordinator/store.h"

#include <algorithm>
#include <mutex>
#include <set>

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
  std::unique_ptr<Store> store(new Store(std::move(db)));
  auto next = store->db_->Get(kNextJobKey);
  if (next.ok()) {
    if (!absl::SimpleAtoi(*next, &store->next_id_)) {
      return absl::DataLossError(absl::StrCat("store ", dir, ": the job counter '", *next, "' is not a number"));
    }
  } else if (!absl::IsNotFound(next.status())) {
    return next.status();
  }
  // The index, from every record (once per coordinator start).
  absl::Status bad;
  RETURN_IF_ERROR(store->db_->Scan("job/", [&](absl::string_view key, absl::string_view value) {
    v1::Job job;
    if (!job.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      bad = absl::DataLossError(absl::StrCat("store ", dir, ": stored job ", key, " is corrupt"));
      return false;
    }
    int64_t n = 0;
    if (absl::SimpleAtoi(absl::string_view(job.id()).substr(2), &n)) store->next_id_ = std::max(store->next_id_, n + 1);
    store->Index(job);
    return true;
  }));
  RETURN_IF_ERROR(bad);
  return store;
}

absl::Status Store::InjectedFault() {
  int left = failing_writes_.load();
  while (left > 0) {
    if (failing_writes_.compare_exchange_weak(left, left - 1)) {
      return absl::UnavailableError("store: write failed (injected by a test: FailNextWrites)");
    }
  }
  return absl::OkStatus();
}

std::vector<std::unique_lock<std::mutex>> Store::LockStripes(const std::vector<std::string>& job_ids) {
  std::set<size_t> stripes;  // in index order: two writers never wait for each other's
  for (const auto& id : job_ids) stripes.insert(std::hash<std::string>()(id) % kStripes);
  std::vector<std::unique_lock<std::mutex>> locks;
  for (size_t i : stripes) locks.emplace_back(stripes_[i]);
  return locks;
}

absl::StatusOr<int64_t> Store::TakeSeq(const std::string& job_id) {
  {
    std::lock_guard<std::mutex> l(seq_mu_);
    auto it = next_seq_.find(job_id);
    if (it != next_seq_.end()) return it->second++;
  }
  // The job's first event since the store opened: after the last one stored. (Its stripe
  // is held: nobody else takes this job's numbers meanwhile.)
  auto last = db_->NewCursor(EventPrefix(job_id));
  last->SeekToLast();
  int64_t seq = 0;
  if (last->Valid() && !absl::SimpleAtoi(last->suffix(), &seq)) seq = 0;
  RETURN_IF_ERROR(last->status());
  std::lock_guard<std::mutex> l(seq_mu_);
  next_seq_[job_id] = seq + 2;
  return seq + 1;
}

void Store::GiveBackSeqs(const std::map<std::string, int64_t>& before) {
  std::lock_guard<std::mutex> l(seq_mu_);
  for (const auto& [id, n] : before) next_seq_[id] = n;
}

absl::StatusOr<std::string> Store::CreateJob(v1::Job job, std::vector<v1::JobEvent> events, const std::string& device,
                                             const std::function<void(const std::string& id)>& created) {
  int64_t n = 0;
  {
    std::lock_guard<std::mutex> l(seq_mu_);
    n = next_id_++;
  }
  job.set_id(absl::StrFormat("j-%06d", n));
  std::lock_guard<std::mutex> stripe(StripeOf(job.id()));
  rocks::Batch b;
  b.Put(kNextJobKey, std::to_string(n + 1));
  b.Put(JobKey(job.id()), job.SerializeAsString());
  // A new job has no events stored (its id was never used): they count from 1.
  int64_t seq = 1;
  for (auto& e : events) {
    e.set_job_id(job.id());
    e.set_seq(seq++);
    b.Put(EventKey(job.id(), e.seq()), e.SerializeAsString());
  }
  RETURN_IF_ERROR(InjectedFault());
  RETURN_IF_ERROR(db_->Write(b));  // a failed id is skipped, never reused
  if (!events.empty()) {
    std::lock_guard<std::mutex> l(seq_mu_);
    next_seq_[job.id()] = seq;
  }
  if (created) created(job.id());
  Index(job, device);
  return job.id();
}

absl::Status Store::PutJob(const v1::Job& job, bool sync) {
  std::lock_guard<std::mutex> stripe(StripeOf(job.id()));
  RETURN_IF_ERROR(InjectedFault());
  RETURN_IF_ERROR(db_->Put(JobKey(job.id()), job.SerializeAsString(), sync));
  Index(job);
  return absl::OkStatus();
}

absl::Status Store::Commit(std::vector<Update>* updates, bool sync) {
  std::vector<std::string> ids;
  for (const auto& u : *updates) {
    ids.push_back(u.job.id());
    for (const auto& e : u.events) ids.push_back(e.job_id());
  }
  auto locks = LockStripes(ids);
  // The sequence numbers taken, given back if the write fails.
  std::map<std::string, int64_t> before;
  rocks::Batch b;
  for (auto& u : *updates) {
    b.Put(JobKey(u.job.id()), u.job.SerializeAsString());
    for (auto& e : u.events) {
      auto seq = TakeSeq(e.job_id());
      if (!seq.ok()) {
        GiveBackSeqs(before);
        return seq.status();
      }
      before.try_emplace(e.job_id(), *seq);
      e.set_seq(*seq);
      b.Put(EventKey(e.job_id(), e.seq()), e.SerializeAsString());
    }
  }
  if (auto s = InjectedFault(); !s.ok()) {
    GiveBackSeqs(before);
    return s;
  }
  if (auto s = db_->Write(b, sync); !s.ok()) {
    GiveBackSeqs(before);
    return s;
  }
  for (const auto& u : *updates) Index(u.job);
  return absl::OkStatus();
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
  // In submission order, as the brief listing: the keys' text order puts j-1000000 first.
  std::stable_sort(out.begin(), out.end(),
                   [](const v1::Job& a, const v1::Job& b) { return placement::JobIdLess()(a.id(), b.id()); });
  return out;
}

absl::StatusOr<int64_t> Store::AppendEvent(v1::JobEvent event, bool sync) {
  std::lock_guard<std::mutex> stripe(StripeOf(event.job_id()));
  ASSIGN_OR_RETURN(const int64_t seq, TakeSeq(event.job_id()));
  event.set_seq(seq);
  absl::Status s = InjectedFault();
  if (s.ok()) s = db_->Put(EventKey(event.job_id(), seq), event.SerializeAsString(), sync);
  if (!s.ok()) {
    GiveBackSeqs({{event.job_id(), seq}});
    return s;
  }
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

// ---- The index.

void Store::Unqueue(const std::string& id, const Brief& b) {
  if (!placement::Queued(b.state)) return;
  if (b.resolved) {
    auto q = queues_.find(b.device);
    if (q != queues_.end()) {
      q->second.erase(b.key);
      if (q->second.empty()) queues_.erase(q);
    }
    auto d = team_queues_.find(b.device);
    if (d != team_queues_.end()) {
      auto t = d->second.find(b.brief->team());
      if (t != d->second.end()) {
        t->second.erase(b.key);
        if (t->second.empty()) d->second.erase(t);
      }
      if (d->second.empty()) team_queues_.erase(d);
    }
  } else {
    unresolved_.erase(id);
  }
}

void Store::Enqueue(const std::string& id, const Brief& b) {
  if (!placement::Queued(b.state)) return;
  if (b.resolved) {
    queues_[b.device].emplace(b.key, &b);
    team_queues_[b.device][b.brief->team()].emplace(b.key, &b);
  } else {
    unresolved_.insert(id);
  }
}

void Store::Index(const v1::Job& job, const std::string& device) {
  auto brief = std::make_shared<v1::Job>(job);  // made before the lock
  brief->clear_spec_yaml();
  brief->clear_spec_normalised();
  std::lock_guard<std::mutex> l(index_mu_);
  Brief& b = index_[job.id()];
  if (b.known) {  // what it was
    --by_state_[b.state];
    Unqueue(job.id(), b);
  }
  b.known = true;
  if (!device.empty()) {
    b.device = device;
    b.resolved = true;
  }
  b.state = job.state();
  b.key = placement::QueueKey::Of(job);
  b.brief = std::move(brief);
  ++by_state_[b.state];
  if (Placed(b.state)) {
    placed_.emplace(job.id(), &b);
  } else {
    placed_.erase(job.id());
  }
  Enqueue(job.id(), b);
}

void Store::SetDevice(const std::string& id, const std::string& device) {
  std::lock_guard<std::mutex> l(index_mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return;
  Brief& b = it->second;
  if (b.resolved && b.device == device) return;
  Unqueue(id, b);
  b.device = device;
  b.resolved = true;
  Enqueue(id, b);
}

std::vector<std::shared_ptr<const v1::Job>> Store::ListBrief() const {
  std::lock_guard<std::mutex> l(index_mu_);
  std::vector<std::shared_ptr<const v1::Job>> out;
  out.reserve(index_.size());
  for (const auto& [id, b] : index_) out.push_back(b.brief);  // index_ is in id order
  return out;
}

std::vector<std::shared_ptr<const v1::Job>> Store::BriefPage(v1::JobState state, const std::string& before,
                                                              size_t limit, bool* more) const {
  std::lock_guard<std::mutex> l(index_mu_);
  std::vector<std::shared_ptr<const v1::Job>> out;
  *more = false;
  auto it = before.empty() ? index_.end() : index_.lower_bound(before);  // the first not before it
  while (it != index_.begin()) {
    --it;
    if (state != v1::JOB_STATE_UNSPECIFIED && it->second.state != state) continue;
    if (out.size() == limit) {
      *more = true;
      break;
    }
    out.push_back(it->second.brief);
  }
  return out;
}

std::vector<std::string> Store::Unresolved() const {
  std::lock_guard<std::mutex> l(index_mu_);
  return {unresolved_.begin(), unresolved_.end()};
}

std::vector<std::string> Store::QueuedDevices() const {
  std::lock_guard<std::mutex> l(index_mu_);
  std::vector<std::string> out;
  for (const auto& [device, q] : queues_) out.push_back(device);
  return out;
}

std::optional<placement::QueueKey> Store::NextQueued(const std::string& device,
                                                     const std::optional<placement::QueueKey>& after) const {
  std::lock_guard<std::mutex> l(index_mu_);
  auto q = queues_.find(device);
  if (q == queues_.end()) return std::nullopt;
  auto it = after ? q->second.upper_bound(*after) : q->second.begin();
  if (it == q->second.end()) return std::nullopt;
  return it->first;
}

std::vector<std::string> Store::QueuedTeams(const std::string& device) const {
  std::lock_guard<std::mutex> l(index_mu_);
  std::vector<std::string> out;
  auto d = team_queues_.find(device);
  if (d == team_queues_.end()) return out;
  for (const auto& [team, q] : d->second) out.push_back(team);
  return out;
}

std::optional<std::pair<placement::QueueKey, Store::BriefJob>> Store::NextQueuedOfTeam(
    const std::string& device, const std::string& team, const std::optional<placement::QueueKey>& after) const {
  std::lock_guard<std::mutex> l(index_mu_);
  auto d = team_queues_.find(device);
  if (d == team_queues_.end()) return std::nullopt;
  auto t = d->second.find(team);
  if (t == d->second.end()) return std::nullopt;
  auto it = after ? t->second.upper_bound(*after) : t->second.begin();
  if (it == t->second.end()) return std::nullopt;
  return std::make_pair(it->first, it->second->brief);
}

bool Store::IsQueued(const std::string& id) const {
  std::lock_guard<std::mutex> l(index_mu_);
  auto it = index_.find(id);
  return it != index_.end() && placement::Queued(it->second.state);
}

bool Store::AnyQueued(const std::string& device) const {
  std::lock_guard<std::mutex> l(index_mu_);
  return queues_.count(device) > 0;
}

std::pair<int64_t, std::string> Store::QueuePosition(const std::string& id) const {
  std::lock_guard<std::mutex> l(index_mu_);
  auto it = index_.find(id);
  if (it == index_.end() || !placement::Queued(it->second.state) || !it->second.resolved) return {0, ""};
  auto q = queues_.find(it->second.device);
  if (q == queues_.end()) return {0, ""};
  int64_t pos = 0;
  std::string before;
  for (const auto& [k, b] : q->second) {  // a walk to the job: positions are not kept
    ++pos;
    if (k.id == id) return {pos, before};
    before = k.id;
  }
  return {0, ""};
}

std::map<std::string, std::pair<int64_t, std::string>> Store::QueuePositions() const {
  std::lock_guard<std::mutex> l(index_mu_);
  std::map<std::string, std::pair<int64_t, std::string>> out;
  for (const auto& [device, q] : queues_) {
    int64_t pos = 0;
    std::string before;
    for (const auto& [k, b] : q) {
      out[k.id] = {++pos, before};
      before = k.id;
    }
  }
  return out;
}

std::optional<std::pair<std::string, std::string>> Store::QueuedAt(const std::string& id) const {
  std::lock_guard<std::mutex> l(index_mu_);
  auto it = index_.find(id);
  if (it == index_.end() || !placement::Queued(it->second.state) || !it->second.resolved) return std::nullopt;
  return std::make_pair(it->second.device, it->second.brief->team());
}

std::vector<std::string> Store::JobsIn(v1::JobState state) const {
  std::lock_guard<std::mutex> l(index_mu_);
  std::vector<std::string> out;
  for (const auto& [id, b] : index_) {
    if (b.state == state) out.push_back(id);
  }
  return out;
}

std::vector<std::pair<placement::QueueKey, Store::BriefJob>> Store::QueuedBriefs(const std::string& device) const {
  std::lock_guard<std::mutex> l(index_mu_);
  std::vector<std::pair<placement::QueueKey, BriefJob>> out;
  auto q = queues_.find(device);
  if (q == queues_.end()) return out;
  out.reserve(q->second.size());
  for (const auto& [k, b] : q->second) out.emplace_back(k, b->brief);
  return out;
}

std::vector<std::pair<Store::BriefJob, std::string>> Store::PlacedBriefs() const {
  std::lock_guard<std::mutex> l(index_mu_);
  std::vector<std::pair<BriefJob, std::string>> out;
  out.reserve(placed_.size());
  for (const auto& [id, b] : placed_) out.emplace_back(b->brief, b->resolved ? b->device : "");
  return out;
}

std::map<v1::JobState, int64_t> Store::CountByState() const {
  std::lock_guard<std::mutex> l(index_mu_);
  return by_state_;
}

}  // namespace gantry::coordinator
