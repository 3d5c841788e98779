// The one RocksDB wrapper of the daemons that keep state (the coordinator's jobs and events,
// the shard server's checkpoint chunks): open with options and column families, writes
// synced by default (WAL fsync before the call returns), atomic batches, point reads,
// cursors bounded to a key prefix, and one mapping from rocksdb::Status to absl::Status that
// names the store and the key or operation.
//
// Crash tests stop a process between two writes with kill points (common/kill_point.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
class Iterator;
class Status;
class WriteBatch;
}  // namespace rocksdb

namespace gantry::rocks {

// A column family of an open Db (nullptr: the default family). Valid while the Db is.
using Family = rocksdb::ColumnFamilyHandle*;

// rocksdb::Status → absl::Status, the message prefixed with `context` (which should name
// the store and the key or operation): NotFound → NOT_FOUND, Corruption → DATA_LOSS,
// InvalidArgument → INVALID_ARGUMENT, NotSupported → UNIMPLEMENTED, out of space →
// RESOURCE_EXHAUSTED, Busy/TryAgain/TimedOut/IOError (a lock held by another process,
// a disk error) → UNAVAILABLE, the rest → INTERNAL.
absl::Status ToStatus(const rocksdb::Status& s, absl::string_view context);

// The smallest key greater than every key starting with prefix ("" when there is none:
// the prefix is empty or all 0xff bytes).
std::string PrefixEnd(absl::string_view prefix);

struct OpenOptions {
  bool create_if_missing = true;
  // Families besides "default", created when missing. Families the store already has are
  // opened whether named here or not (RocksDB refuses to open a store without all of them).
  std::vector<std::string> column_families;
};

// Writes applied together by Db::Write: all or none, also across families.
class Batch {
 public:
  Batch();
  ~Batch();
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  void Put(absl::string_view key, absl::string_view value, Family family = nullptr);
  void Delete(absl::string_view key, Family family = nullptr);
  // Every key that starts with prefix. A prefix with no upper bound (empty, or all 0xff
  // bytes) makes Db::Write refuse the batch (INVALID_ARGUMENT).
  void DeletePrefix(absl::string_view prefix, Family family = nullptr);
  int Count() const;
  void Clear();

 private:
  friend class Db;
  std::unique_ptr<rocksdb::WriteBatch> batch_;
  std::string bad_;  // why Write must refuse the batch
};

// Iterates the keys of one prefix in order; Valid() is false outside it. Holds an implicit
// snapshot of the store from its creation.
class Cursor {
 public:
  ~Cursor();
  void SeekToFirst();
  void SeekToLast();
  // The first key >= key / the last key <= key, within the prefix.
  void Seek(absl::string_view key);
  void SeekForPrev(absl::string_view key);
  void Next();
  bool Valid() const;
  absl::string_view key() const;   // Valid() only
  absl::string_view value() const;  // Valid() only
  // The key with the prefix cut off (Valid() only).
  absl::string_view suffix() const { return key().substr(prefix_.size()); }
  // An iteration that stopped early on an error (a disk error, corruption) says so here.
  absl::Status status() const;

 private:
  friend class Db;
  Cursor(const std::string& store, std::string prefix);
  std::string store_, prefix_, end_;
  std::unique_ptr<rocksdb::Iterator> it_;
};

class Db {
 public:
  static absl::StatusOr<std::unique_ptr<Db>> Open(const std::string& path, const OpenOptions& options = {});
  ~Db();  // closes the store (a Cursor must not outlive it)
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  const std::string& path() const { return path_; }
  // The family of that name (opened at Open), or NOT_FOUND naming it and the store.
  absl::StatusOr<Family> family(absl::string_view name) const;

  // Writes are synced unless sync is false (then the write is in the WAL, which a process
  // crash keeps, but not fsynced, which a machine crash may lose).
  absl::Status Put(absl::string_view key, absl::string_view value, bool sync = true, Family family = nullptr);
  absl::Status Write(Batch& batch, bool sync = true);
  // NOT_FOUND (naming the key and the store) for a missing key.
  absl::StatusOr<std::string> Get(absl::string_view key, Family family = nullptr) const;
  std::unique_ptr<Cursor> NewCursor(absl::string_view prefix, Family family = nullptr) const;
  // Calls fn(key, value) for each key of prefix in order while fn returns true.
  absl::Status Scan(absl::string_view prefix, const std::function<bool(absl::string_view, absl::string_view)>& fn,
                    Family family = nullptr) const;
  // A RocksDB integer property ("rocksdb.estimate-live-data-size", ...), 0 if unknown.
  uint64_t IntProperty(const std::string& name) const;

 private:
  Db(std::string path, rocksdb::DB* db, std::vector<rocksdb::ColumnFamilyHandle*> families);
  std::string path_;
  rocksdb::DB* db_;
  std::vector<rocksdb::ColumnFamilyHandle*> families_;  // every family opened, "default" first
};

}  // namespace gantry::rocks
