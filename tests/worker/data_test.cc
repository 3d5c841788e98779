#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "common/file_util.h"
#include "tests/test_util.h"
#include "worker/data/loader.h"
#include "worker/data/prepare.h"
#include "worker/data/token_file.h"

namespace gantry::data {
namespace {

std::vector<uint16_t> Iota(size_t n, int mod) {
  std::vector<uint16_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint16_t>(i % mod);
  return t;
}

TEST(TokenFileTest, RoundTrips) {
  testing::TempDir d;
  auto toks = Iota(1000, 97);
  ASSERT_TRUE(WriteTokenFile(d.File("a.bin"), toks).ok());
  auto f = TokenFile::Open(d.File("a.bin"), 97);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(std::vector<uint16_t>(f->data(), f->data() + f->size()), toks);
}

TEST(TokenFileTest, BadMagicIsNamed) {
  testing::TempDir d;
  ASSERT_TRUE(WriteTokenFile(d.File("a.bin"), Iota(10, 5)).ok());
  auto bytes = *ReadFileToString(d.File("a.bin"));
  bytes[0] ^= 0x55;
  ASSERT_TRUE(WriteFileAtomic(d.File("a.bin"), bytes).ok());
  auto f = TokenFile::Open(d.File("a.bin"), 5);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("bad magic"), absl::string_view::npos) << f.status();
  EXPECT_NE(f.status().message().find("a.bin"), absl::string_view::npos);
}

TEST(TokenFileTest, TruncatedBodyIsNamed) {
  testing::TempDir d;
  ASSERT_TRUE(WriteTokenFile(d.File("a.bin"), Iota(10, 5)).ok());
  auto bytes = *ReadFileToString(d.File("a.bin"));
  bytes.resize(bytes.size() - 3);
  ASSERT_TRUE(WriteFileAtomic(d.File("a.bin"), bytes).ok());
  auto f = TokenFile::Open(d.File("a.bin"), 5);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("truncated"), absl::string_view::npos) << f.status();
  bytes.resize(100);  // shorter than the header
  ASSERT_TRUE(WriteFileAtomic(d.File("a.bin"), bytes).ok());
  EXPECT_FALSE(TokenFile::Open(d.File("a.bin"), 5).ok());
}

TEST(TokenFileTest, TokenOutsideVocabularyIsNamedWithPosition) {
  testing::TempDir d;
  auto toks = Iota(10, 5);
  toks[7] = 300;
  ASSERT_TRUE(WriteTokenFile(d.File("a.bin"), toks).ok());
  auto f = TokenFile::Open(d.File("a.bin"), 256);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("token 300 at position 7"), absl::string_view::npos) << f.status();
}

TEST(TokenFileTest, MissingFileIsNotFound) {
  EXPECT_EQ(TokenFile::Open("/nonexistent/x.bin", 5).status().code(), absl::StatusCode::kNotFound);
}

TEST(BatchLoaderTest, TargetsAreInputsShiftedByOne) {
  testing::TempDir d;
  ASSERT_TRUE(WriteTokenFile(d.File("a.bin"), Iota(1000, 1000)).ok());
  auto f = *TokenFile::Open(d.File("a.bin"), 1000);
  auto l = *BatchLoader::Create(&f, 2, 5, 0, false);
  EXPECT_EQ(l.num_windows(), 999 / 10);
  std::vector<int32_t> in(10), tg(10);
  l.Fill(3, in.data(), tg.data());
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(in[i], 30 + i);
    EXPECT_EQ(tg[i], 31 + i);
  }
  l.Fill(l.num_windows() + 1, in.data(), tg.data());  // second epoch wraps around
  EXPECT_EQ(in[0], 10);
}

TEST(BatchLoaderTest, ShuffleIsAPermutationPerEpochFixedBySeed) {
  testing::TempDir d;
  ASSERT_TRUE(WriteTokenFile(d.File("a.bin"), Iota(10001, 7)).ok());
  auto f = *TokenFile::Open(d.File("a.bin"), 7);
  auto a = *BatchLoader::Create(&f, 2, 5, 42, true);
  auto b = *BatchLoader::Create(&f, 2, 5, 42, true);
  auto c = *BatchLoader::Create(&f, 2, 5, 43, true);
  const int64_t n = a.num_windows();
  std::set<int64_t> e0, e1;
  bool differs_from_other_seed = false, differs_between_epochs = false;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t w = a.WindowFor(i);
    EXPECT_EQ(w, b.WindowFor(i));
    differs_from_other_seed |= w != c.WindowFor(i);
    e0.insert(w);
  }
  for (int64_t i = 0; i < n; ++i) {
    e1.insert(a.WindowFor(n + i));
    differs_between_epochs |= a.WindowFor(n + i) != a.WindowFor(i);
  }
  EXPECT_EQ(static_cast<int64_t>(e0.size()), n);
  EXPECT_EQ(static_cast<int64_t>(e1.size()), n);
  EXPECT_TRUE(differs_from_other_seed);
  EXPECT_TRUE(differs_between_epochs);
  // Reading out of order (as a resumed run does) gives the same windows.
  auto r = *BatchLoader::Create(&f, 2, 5, 42, true);
  EXPECT_EQ(r.WindowFor(n + 5), a.WindowFor(n + 5));
  EXPECT_EQ(r.WindowFor(3), a.WindowFor(3));
}

TEST(BatchLoaderTest, FileShorterThanOneBatchIsAnError) {
  testing::TempDir d;
  ASSERT_TRUE(WriteTokenFile(d.File("a.bin"), Iota(10, 7)).ok());
  auto f = *TokenFile::Open(d.File("a.bin"), 7);
  auto l = BatchLoader::Create(&f, 2, 5, 0, false);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("B*T+1 = 11"), absl::string_view::npos) << l.status();
}

TEST(PrepareTest, SplitsFortuneEntriesIntoTrainAndVal) {
  testing::TempDir d;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "fortune number " + std::to_string(i) + "\nsecond line\n%\n";
  ASSERT_TRUE(WriteFileAtomic(d.File("quotes"), text).ok());
  ASSERT_TRUE(WriteFileAtomic(d.File("quotes.dat"), std::string("\0\1\2binary", 9)).ok());
  PrepareOptions o;
  o.inputs = {d.path()};
  o.out_dir = d.File("out");
  o.val_fraction = 0.1;
  auto r = Prepare(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->files, 1);  // the binary index file is skipped
  EXPECT_EQ(r->documents, 40);
  auto val = *TokenFile::Open(r->val_path, 256);
  auto train = *TokenFile::Open(r->train_path, 256);
  std::vector<uint16_t> v(val.data(), val.data() + val.size());
  EXPECT_EQ(std::count(v.begin(), v.end(), kEndOfText), 4);
  const std::string vtext = DecodeBytes(v);
  EXPECT_NE(vtext.find("fortune number 9\nsecond line"), std::string::npos);
  EXPECT_EQ(vtext.find('%'), std::string::npos);
  // Each entry loses its "\n%\n" (3 bytes) and gains one end-of-text token.
  EXPECT_EQ(train.size() + val.size(), text.size() - 40 * 2);
}

TEST(PrepareTest, MissingInputIsAnError) {
  PrepareOptions o;
  o.inputs = {"/nonexistent/corpus"};
  o.out_dir = "/tmp/unused";
  EXPECT_EQ(Prepare(o, nullptr).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gantry::data
