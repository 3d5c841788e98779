#include "common/rocks.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace gantry::rocks {
namespace {

rocksdb::Slice S(absl::string_view s) { return rocksdb::Slice(s.data(), s.size()); }
absl::string_view V(const rocksdb::Slice& s) { return absl::string_view(s.data(), s.size()); }

rocksdb::WriteOptions Writing(bool sync) {
  rocksdb::WriteOptions w;
  w.sync = sync;
  return w;
}

}  // namespace

absl::Status ToStatus(const rocksdb::Status& s, absl::string_view context) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat(context, ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsNotSupported()) return absl::UnimplementedError(msg);
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsBusy() || s.IsTryAgain() || s.IsTimedOut() || s.IsIOError() || s.IsShutdownInProgress()) {
    return absl::UnavailableError(msg);
  }
  if (s.IsAborted()) return absl::AbortedError(msg);
  return absl::InternalError(msg);
}

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (!end.empty()) end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
}

// ---- Batch

Batch::Batch() : batch_(std::make_unique<rocksdb::WriteBatch>()) {}
Batch::~Batch() = default;

void Batch::Put(absl::string_view key, absl::string_view value, Family family) {
  // WriteBatch only fails past its 4 GiB limit (max_bytes is unset); Db::Write's size check
  // is RocksDB's own.
  (void)batch_->Put(family, S(key), S(value));
}
void Batch::Delete(absl::string_view key, Family family) { (void)batch_->Delete(family, S(key)); }
void Batch::DeletePrefix(absl::string_view prefix, Family family) {
  const std::string end = PrefixEnd(prefix);
  if (end.empty()) {  // no key bounds the range: refused at Write
    if (bad_.empty()) bad_ = absl::StrCat("deleting the keys of prefix '", prefix, "': it has no upper bound");
    return;
  }
  (void)batch_->DeleteRange(family, S(prefix), S(end));
}
int Batch::Count() const { return static_cast<int>(batch_->Count()); }
void Batch::Clear() {
  batch_->Clear();
  bad_.clear();
}

// ---- Cursor

Cursor::Cursor(const std::string& store, std::string prefix)
    : store_(store), prefix_(std::move(prefix)), end_(PrefixEnd(prefix_)) {}
Cursor::~Cursor() = default;

void Cursor::SeekToFirst() { it_->Seek(S(prefix_)); }
void Cursor::SeekToLast() {
  if (end_.empty()) {
    it_->SeekToLast();
    return;
  }
  it_->SeekForPrev(S(end_));
  if (it_->Valid() && V(it_->key()) == end_) it_->Prev();
}
void Cursor::Seek(absl::string_view key) { it_->Seek(S(std::max(key, absl::string_view(prefix_)))); }
void Cursor::SeekForPrev(absl::string_view key) {
  if (!end_.empty() && key >= end_) {
    SeekToLast();
  } else {
    it_->SeekForPrev(S(key));
  }
}
void Cursor::Next() { it_->Next(); }
bool Cursor::Valid() const { return it_->Valid() && it_->key().starts_with(S(prefix_)); }
absl::string_view Cursor::key() const { return V(it_->key()); }
absl::string_view Cursor::value() const { return V(it_->value()); }
absl::Status Cursor::status() const {
  return ToStatus(it_->status(), absl::StrCat("store ", store_, ": iterating keys '", prefix_, "...'"));
}

// ---- Db

Db::Db(std::string path, rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*> families)
    : path_(std::move(path)), db_(db), families_(std::move(families)) {}

Db::~Db() {
  for (auto* f : families_) (void)db_->DestroyColumnFamilyHandle(f);
  delete db_;
}

absl::StatusOr<std::unique_ptr<Db>> Db::Open(const std::string& path, const OpenOptions& options) {
  rocksdb::Options o;
  o.create_if_missing = options.create_if_missing;
  o.create_missing_column_families = true;
  // The families on disk (none yet for a new store), then the ones asked for.
  std::vector<std::string> names;
  auto listed = rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(o), path, &names);
  if (!listed.ok() && !(listed.IsIOError() && options.create_if_missing)) {  // IOError: no store there yet
    return ToStatus(listed, absl::StrCat("opening store ", path, ": listing its column families"));
  }
  if (std::find(names.begin(), names.end(), rocksdb::kDefaultColumnFamilyName) == names.end()) {
    names.insert(names.begin(), rocksdb::kDefaultColumnFamilyName);
  }
  for (const auto& f : options.column_families) {
    if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
  }
  std::stable_partition(names.begin(), names.end(), [](const std::string& n) { return n == rocksdb::kDefaultColumnFamilyName; });
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const auto& n : names) descriptors.emplace_back(n, rocksdb::ColumnFamilyOptions(o));
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  auto s = rocksdb::DB::Open(rocksdb::DBOptions(o), path, descriptors, &handles, &db);
  if (!s.ok()) {
    return ToStatus(s, absl::StrCat("opening store ", path, " (column families ", absl::StrJoin(names, ", "), ")"));
  }
  return std::unique_ptr<Db>(new Db(path, db, std::move(handles)));
}

absl::StatusOr<Family> Db::family(absl::string_view name) const {
  std::vector<std::string> names;
  for (auto* f : families_) {
    if (f->GetName() == name) return f == families_.front() ? nullptr : f;
    names.push_back(f->GetName());
  }
  return absl::NotFoundError(absl::StrCat("store ", path_, " has no column family '", name, "' (it has ",
                                          absl::StrJoin(names, ", "), ")"));
}

absl::Status Db::Put(absl::string_view key, absl::string_view value, bool sync, Family family) {
  return ToStatus(db_->Put(Writing(sync), family != nullptr ? family : db_->DefaultColumnFamily(), S(key), S(value)),
                  absl::StrCat("store ", path_, ": writing key '", key, "'"));
}

absl::Status Db::Write(Batch& batch, bool sync) {
  if (!batch.bad_.empty()) return absl::InvalidArgumentError(absl::StrCat("store ", path_, ": ", batch.bad_));
  return ToStatus(db_->Write(Writing(sync), batch.batch_.get()),
                  absl::StrCat("store ", path_, ": writing a batch of ", batch.Count(), " updates"));
}

absl::StatusOr<std::string> Db::Get(absl::string_view key, Family family) const {
  std::string value;
  auto s = db_->Get(rocksdb::ReadOptions(), family != nullptr ? family : db_->DefaultColumnFamily(), S(key), &value);
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrCat("store ", path_, ": no key '", key, "'"));
  if (!s.ok()) return ToStatus(s, absl::StrCat("store ", path_, ": reading key '", key, "'"));
  return value;
}

std::unique_ptr<Cursor> Db::NewCursor(absl::string_view prefix, Family family) const {
  std::unique_ptr<Cursor> c(new Cursor(path_, std::string(prefix)));
  c->it_.reset(db_->NewIterator(rocksdb::ReadOptions(), family != nullptr ? family : db_->DefaultColumnFamily()));
  return c;
}

absl::Status Db::Scan(absl::string_view prefix, const std::function<bool(absl::string_view, absl::string_view)>& fn,
                      Family family) const {
  auto c = NewCursor(prefix, family);
  for (c->SeekToFirst(); c->Valid(); c->Next()) {
    if (!fn(c->key(), c->value())) break;
  }
  return c->status();
}

uint64_t Db::IntProperty(const std::string& name) const {
  uint64_t v = 0;
  return db_->GetIntProperty(name, &v) ? v : 0;
}

}  // namespace gantry::rocks
