// The RocksDB wrapper (common/rocks.h) and kill points (common/kill_point.h).
#include "common/rocks.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/kill_point.h"
#include "rocksdb/status.h"
#include "tests/test_util.h"

namespace gantry {
namespace {

const KillPoint kTestPoint("test.point", KillPoint::kBeforeCommit, "a point for the tests");
const KillPoint kTestOther("test.other", KillPoint::kAfterCommit, "another point for the tests");

std::vector<std::string> Keys(const rocks::Db& db, const std::string& prefix, rocks::Family f = nullptr) {
  std::vector<std::string> keys;
  EXPECT_TRUE(db.Scan(prefix, [&](absl::string_view k, absl::string_view) {
                  keys.emplace_back(k);
                  return true;
                }, f).ok());
  return keys;
}

TEST(RocksTest, ColumnFamiliesAreCreatedWhenMissingAndReopenedWithoutBeingNamed) {
  testing::TempDir d;
  {
    auto db = rocks::Db::Open(d.File("db"), {.column_families = {"meta"}});
    ASSERT_TRUE(db.ok()) << db.status();
    auto meta = (*db)->family("meta");
    ASSERT_TRUE(meta.ok()) << meta.status();
    ASSERT_TRUE((*db)->Put("k", "in default").ok());
    ASSERT_TRUE((*db)->Put("k", "in meta", true, *meta).ok());
  }
  // Reopened without naming "meta" (RocksDB would refuse that): it is opened anyway, its
  // data intact, and a family named now is created.
  auto db = rocks::Db::Open(d.File("db"), {.column_families = {"extra"}});
  ASSERT_TRUE(db.ok()) << db.status();
  auto meta = (*db)->family("meta");
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(*(*db)->Get("k"), "in default");
  EXPECT_EQ(*(*db)->Get("k", *meta), "in meta");
  auto extra = (*db)->family("extra");
  ASSERT_TRUE(extra.ok()) << extra.status();
  EXPECT_EQ((*db)->Get("k", *extra).status().code(), absl::StatusCode::kNotFound);
  auto none = (*db)->family("nope");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("'nope'"), std::string::npos) << none.status();
  EXPECT_NE(none.status().message().find("meta"), std::string::npos) << "names the families there are";
}

TEST(RocksTest, ABatchAppliesAcrossFamiliesAndDeletesExactlyAPrefix) {
  testing::TempDir d;
  auto db = rocks::Db::Open(d.File("db"), {.column_families = {"other"}});
  ASSERT_TRUE(db.ok()) << db.status();
  rocks::Family other = *(*db)->family("other");
  rocks::Batch b;
  for (const char* k : {"a/1", "a/2", "a/\xff", "a0", "a", "b/1"}) b.Put(k, "v");
  b.Put("a/1", "other family", other);
  EXPECT_EQ(b.Count(), 7);
  ASSERT_TRUE((*db)->Write(b).ok());
  EXPECT_EQ(Keys(**db, "a/"), (std::vector<std::string>{"a/1", "a/2", "a/\xff"}));
  EXPECT_EQ(*(*db)->Get("a/1", other), "other family");
  rocks::Batch del;
  del.DeletePrefix("a/");
  del.Delete("b/1");
  ASSERT_TRUE((*db)->Write(del).ok());
  EXPECT_TRUE(Keys(**db, "a/").empty());
  EXPECT_EQ(Keys(**db, ""), (std::vector<std::string>{"a", "a0"})) << "only the prefix's keys and b/1 are gone";
  EXPECT_EQ(*(*db)->Get("a/1", other), "other family") << "the other family is untouched";
  // A prefix with no upper bound cannot be a range: the batch is refused, nothing written.
  rocks::Batch bad;
  bad.Put("c", "v");
  bad.DeletePrefix("");
  auto s = (*db)->Write(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(d.File("db")), std::string::npos) << s;
  EXPECT_EQ((*db)->Get("c").status().code(), absl::StatusCode::kNotFound);
}

TEST(RocksTest, ACursorStaysInsideItsPrefix) {
  testing::TempDir d;
  auto db = rocks::Db::Open(d.File("db"));
  ASSERT_TRUE(db.ok()) << db.status();
  for (const char* k : {"ev/j1", "ev/j1/001", "ev/j1/002", "ev/j1/003", "ev/j10/001", "ev/j1\xff", "ev/j2/001"}) {
    ASSERT_TRUE((*db)->Put(k, k).ok());
  }
  auto c = (*db)->NewCursor("ev/j1/");
  c->SeekToLast();
  ASSERT_TRUE(c->Valid());
  EXPECT_EQ(c->key(), "ev/j1/003");
  EXPECT_EQ(c->suffix(), "003");
  c->SeekToFirst();
  ASSERT_TRUE(c->Valid());
  EXPECT_EQ(c->value(), "ev/j1/001");
  c->Seek("ev/j1/002");
  ASSERT_TRUE(c->Valid());
  EXPECT_EQ(c->suffix(), "002");
  c->Next();
  c->Next();
  EXPECT_FALSE(c->Valid()) << "ev/j10/001 is another prefix's";
  c->Seek("a");  // before the prefix: its first key
  ASSERT_TRUE(c->Valid());
  EXPECT_EQ(c->suffix(), "001");
  c->SeekForPrev("ev/j1/0025");
  ASSERT_TRUE(c->Valid());
  EXPECT_EQ(c->suffix(), "002");
  c->SeekForPrev("ev/j1/000");
  EXPECT_FALSE(c->Valid()) << "ev/j1 sorts before the prefix";
  c->SeekForPrev("zzz");  // past the prefix: its last key
  ASSERT_TRUE(c->Valid());
  EXPECT_EQ(c->suffix(), "003");
  EXPECT_TRUE(c->status().ok());
  auto empty = (*db)->NewCursor("ev/j3/");
  empty->SeekToLast();
  EXPECT_FALSE(empty->Valid());
  EXPECT_EQ(rocks::PrefixEnd("ab"), "ac");
  EXPECT_EQ(rocks::PrefixEnd("a\xff"), "b");
  EXPECT_EQ(rocks::PrefixEnd("\xff"), "");
}

TEST(RocksTest, ErrorsNameTheStoreAndTheKey) {
  testing::TempDir d;
  auto db = rocks::Db::Open(d.File("db"));
  ASSERT_TRUE(db.ok()) << db.status();
  auto missing = (*db)->Get("job/j-000042");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("job/j-000042"), std::string::npos) << missing.status();
  EXPECT_NE(missing.status().message().find(d.File("db")), std::string::npos) << missing.status();
  // The store is locked by the open Db: a second open is UNAVAILABLE, naming the path.
  auto twice = rocks::Db::Open(d.File("db"));
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kUnavailable) << twice.status();
  EXPECT_NE(twice.status().message().find(d.File("db")), std::string::npos) << twice.status();
  // Not a directory.
  { std::ofstream(d.File("file")) << "x"; }
  auto file = rocks::Db::Open(d.File("file"));
  EXPECT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find(d.File("file")), std::string::npos) << file.status();
  // Nothing there and create_if_missing off.
  auto absent = rocks::Db::Open(d.File("absent"), {.create_if_missing = false, .column_families = {}});
  EXPECT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find(d.File("absent")), std::string::npos) << absent.status();
  EXPECT_FALSE(std::filesystem::exists(d.File("absent")));
}

TEST(RocksTest, RocksStatusMapsToTheAbslCodeWithItsContext) {
  const std::pair<rocksdb::Status, absl::StatusCode> cases[] = {
      {rocksdb::Status::NotFound("k"), absl::StatusCode::kNotFound},
      {rocksdb::Status::Corruption("bad block"), absl::StatusCode::kDataLoss},
      {rocksdb::Status::InvalidArgument("x"), absl::StatusCode::kInvalidArgument},
      {rocksdb::Status::NotSupported("x"), absl::StatusCode::kUnimplemented},
      {rocksdb::Status::NoSpace("disk full"), absl::StatusCode::kResourceExhausted},
      {rocksdb::Status::IOError("lock"), absl::StatusCode::kUnavailable},
      {rocksdb::Status::Busy("x"), absl::StatusCode::kUnavailable},
      {rocksdb::Status::TimedOut("x"), absl::StatusCode::kUnavailable},
      {rocksdb::Status::Aborted("x"), absl::StatusCode::kAborted},
      {rocksdb::Status::Incomplete("x"), absl::StatusCode::kInternal},
  };
  for (const auto& [in, code] : cases) {
    absl::Status s = rocks::ToStatus(in, "store /d: reading key 'k'");
    EXPECT_EQ(s.code(), code) << in.ToString();
    EXPECT_NE(s.message().find("store /d: reading key 'k': "), std::string::npos) << s;
    EXPECT_NE(s.message().find(in.ToString()), std::string::npos) << s;
  }
  EXPECT_TRUE(rocks::ToStatus(rocksdb::Status::OK(), "x").ok());
}

TEST(KillPointTest, EveryDefinedPointIsListed) {
  std::vector<std::string> names;
  for (const KillPoint* p : KillPoints()) names.emplace_back(p->name());
  EXPECT_EQ(names, (std::vector<std::string>{"test.other", "test.point"})) << "the test binary links no daemon";
  EXPECT_EQ(KillPointTable(), "test.other\tafter-commit\tanother point for the tests\n"
                              "test.point\tbefore-commit\ta point for the tests\n");
}

// Death tests re-execute the binary ("threadsafe"): RocksDB's background threads of the
// tests above would be missing in a forked child, their locks held.
TEST(KillPointTest, AnArmedPointKillsTheProcessAtTheArmedHitOnly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!ArmKillPoints("test.point@3").ok()) _exit(3);
        kTestOther.Reach();
        kTestPoint.Reach();
        kTestPoint.Reach();
        kTestOther.Reach();
        kTestPoint.Reach();
        _exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "kill point test.point reached \\(hit 3\\): SIGKILL");
  EXPECT_EXIT(
      {
        if (!ArmKillPoints("test.other").ok()) _exit(3);
        kTestOther.Reach();
        _exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "kill point test.other reached \\(hit 1\\)");
}

TEST(KillPointTest, UnarmedPointsReturn) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!ArmKillPoints("test.other@2").ok()) _exit(3);
        kTestPoint.Reach();
        kTestOther.Reach();  // hit 1 of 2
        if (!ArmKillPoints("").ok()) _exit(4);
        kTestOther.Reach();
        kTestPoint.Reach();
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(KillPointTest, ArmingANameThatIsNoPointIsRefusedNamingThePoints) {
  auto s = ArmKillPoints("shard.nope");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'shard.nope'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("test.other, test.point"), std::string::npos) << s;
  for (const char* bad : {"test.point@0", "test.point@x", "test.point@"}) {
    auto b = ArmKillPoints(bad);
    EXPECT_EQ(b.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(b.message().find(bad), std::string::npos) << b;
  }
  ASSERT_TRUE(ArmKillPoints("").ok());
}

}  // namespace
}  // namespace gantry
