#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "common/file_util.h"
#include "tests/test_util.h"
#include "data/dataset.h"
#include "data/prepare.h"

#include <filesystem>
#include "data/token_file.h"

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

TEST(DatasetTest, RowsInOrderAreLlmcsBatchesAndTargetsAreInputsShiftedByOne) {
  testing::TempDir d;
  ASSERT_TRUE(WriteTokenFile(d.File("a.bin"), Iota(1000, 1000)).ok());
  auto ds = *Dataset::Open(d.File("a.bin"), 5, 1000);
  EXPECT_EQ(ds->rows(), 999 / 5);
  std::vector<int32_t> in(10), tg(10);
  ASSERT_TRUE(ds->Fill(6, 2, 0, false, in.data(), tg.data()).ok());  // llm.c's window 3 of B 2, T 5
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(in[i], 30 + i);
    EXPECT_EQ(tg[i], 31 + i);
  }
  ASSERT_TRUE(ds->Fill(ds->rows() + 2, 2, 0, false, in.data(), tg.data()).ok());  // the second epoch wraps around
  EXPECT_EQ(in[0], 10);
}

TEST(DatasetTest, ShardsAreOneSequenceOfRowsThatNeverCrossAShard) {
  testing::TempDir d;
  // Shards of 23, 11 and 4 tokens, uint16 and uint32: rows of T 5 (6 tokens) per shard: 4, 2, 0.
  std::vector<uint16_t> a(23), b(11);
  for (int i = 0; i < 23; ++i) a[i] = static_cast<uint16_t>(100 + i);
  for (int i = 0; i < 11; ++i) b[i] = static_cast<uint16_t>(200 + i);
  ASSERT_TRUE(WriteTokenFile(d.File("s_000.bin"), a).ok());
  ASSERT_TRUE(WriteTokenFile(d.File("s_001.bin"), std::vector<uint32_t>(b.begin(), b.end()), 70000).ok());
  ASSERT_TRUE(WriteTokenFile(d.File("s_002.bin"), Iota(4, 4)).ok());
  auto ds = Dataset::Open(d.File("s_*.bin"), 5, 70000);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->num_shards(), 3u);
  EXPECT_EQ((*ds)->tokens(), 38);
  EXPECT_EQ((*ds)->rows(), 4 + 2);
  std::vector<int32_t> in(30), tg(30);
  ASSERT_TRUE((*ds)->Fill(3, 3, 0, false, in.data(), tg.data()).ok());
  EXPECT_EQ(in[0], 115);   // shard 0's last row
  EXPECT_EQ(tg[4], 120);
  EXPECT_EQ(in[5], 200);   // then shard 1's first: not shard 0's tail
  EXPECT_EQ(in[10], 205);
  EXPECT_EQ(tg[14], 210);
  auto none = Dataset::Open(d.File("nothing_*.bin"), 5, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("nothing_*.bin"), absl::string_view::npos) << none.status();
}

TEST(DatasetTest, ShuffleIsAPermutationPerEpochFixedBySeed) {
  testing::TempDir d;
  ASSERT_TRUE(WriteTokenFile(d.File("a.bin"), Iota(4001, 7)).ok());
  ASSERT_TRUE(WriteTokenFile(d.File("b.bin"), Iota(3001, 7)).ok());
  auto ds = *Dataset::Open(d.File("*.bin"), 5, 7);
  const int64_t n = ds->rows();
  ASSERT_EQ(n, 800 + 600);
  std::set<int64_t> e0, e1;
  bool differs_from_other_seed = false, differs_between_epochs = false;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t w = ds->RowFor(i, 42, true);
    differs_from_other_seed |= w != ds->RowFor(i, 43, true);
    e0.insert(w);
    e1.insert(ds->RowFor(n + i, 42, true));
    differs_between_epochs |= ds->RowFor(n + i, 42, true) != w;
  }
  EXPECT_EQ(static_cast<int64_t>(e0.size()), n);
  EXPECT_EQ(*e0.rbegin(), n - 1);
  EXPECT_EQ(static_cast<int64_t>(e1.size()), n);
  EXPECT_TRUE(differs_from_other_seed);
  EXPECT_TRUE(differs_between_epochs);
}

TEST(DatasetTest, AStepReadsTheSameRowsWhateverTheLayout) {
  // Global batch 8: (dp 1, micro-batch 8), (dp 2, micro-batch 2, accumulation 2), (dp 4,
  // micro-batch 1, accumulation 2): micro-batch (micro, rank) reads from (micro*dp + rank)*B.
  testing::TempDir d;
  ASSERT_TRUE(WriteTokenFile(d.File("a.bin"), Iota(6001, 997)).ok());
  auto ds = *Dataset::Open(d.File("a.bin"), 4, 997);
  const int T = 4, G = 8;
  auto step_rows = [&](int64_t step, int dp, int B) {
    std::multiset<std::vector<int32_t>> rows;
    std::vector<int32_t> in(static_cast<size_t>(B) * T), tg(in.size());
    for (int micro = 0; micro < G / (dp * B); ++micro) {
      for (int rank = 0; rank < dp; ++rank) {
        EXPECT_TRUE(ds->Fill(step * G + (micro * dp + rank) * B, B, 9, true, in.data(), tg.data()).ok());
        for (int b = 0; b < B; ++b) rows.insert(std::vector<int32_t>(in.begin() + b * T, in.begin() + (b + 1) * T));
      }
    }
    return rows;
  };
  for (int64_t step : {0, 7, 200}) {  // 200: the second epoch (1500 rows)
    const auto one = step_rows(step, 1, 8);
    EXPECT_EQ(step_rows(step, 2, 2), one) << step;
    EXPECT_EQ(step_rows(step, 4, 1), one) << step;
  }
}

TEST(DatasetTest, ABadShardIsAnErrorNamingIt) {
  testing::TempDir d;
  ASSERT_TRUE(WriteTokenFile(d.File("a_0.bin"), Iota(100, 7)).ok());
  auto bytes = *ReadFileToString(d.File("a_0.bin"));
  // Truncated.
  ASSERT_TRUE(WriteFileAtomic(d.File("a_1.bin"), bytes.substr(0, bytes.size() - 3)).ok());
  auto cut = Dataset::Open(d.File("a_*.bin"), 5, 7);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("a_1.bin"), absl::string_view::npos) << cut.status();
  EXPECT_NE(cut.status().message().find("truncated"), absl::string_view::npos) << cut.status();
  // Wrong magic.
  std::string bad = bytes;
  bad[0] = 'X';
  ASSERT_TRUE(WriteFileAtomic(d.File("a_1.bin"), bad).ok());
  auto magic = Dataset::Open(d.File("a_*.bin"), 5, 7);
  ASSERT_FALSE(magic.ok());
  EXPECT_NE(magic.status().message().find("a_1.bin: bad magic"), absl::string_view::npos) << magic.status();
  // An id beyond the vocabulary.
  auto toks = Iota(100, 7);
  toks[42] = 9;
  ASSERT_TRUE(WriteTokenFile(d.File("a_1.bin"), toks).ok());
  auto id = Dataset::Open(d.File("a_*.bin"), 5, 7);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("a_1.bin: token 9 at position 42"), absl::string_view::npos) << id.status();
  // Too short for one row.
  auto short_rows = Dataset::Open(d.File("a_0.bin"), 100, 7);
  ASSERT_FALSE(short_rows.ok());
  EXPECT_NE(short_rows.status().message().find("T+1 = 101"), absl::string_view::npos) << short_rows.status();
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

// What the documents of a prepared byte-token file are: the texts between end-of-text tokens.
std::vector<std::string> DocumentsOf(const std::string& path) {
  auto f = TokenFile::Open(path, 256);
  EXPECT_TRUE(f.ok()) << f.status();
  std::vector<std::string> docs(1);
  for (size_t i = 0; f.ok() && i < f->size(); ++i) {
    if (f->data()[i] == kEndOfText) {
      docs.emplace_back();
    } else {
      docs.back().push_back(static_cast<char>(f->data()[i]));
    }
  }
  docs.pop_back();  // after the last end-of-text
  return docs;
}

TEST(PrepareTest, AFileIsOneDocumentUnlessCutByParagraphOrLine) {
  testing::TempDir d;
  const std::string text = "First paragraph,\nits second line.\n\nSecond paragraph.\nThird line\n";
  std::filesystem::create_directories(d.File("in"));
  ASSERT_TRUE(WriteFileAtomic(d.File("in/a.txt"), text).ok());
  ASSERT_TRUE(WriteFileAtomic(d.File("in/b.txt"), "\n\nAnother file.\n\n").ok());
  PrepareOptions o;
  o.inputs = {d.File("in")};
  o.val_fraction = 0;
  struct Case {
    DocumentCut cut;
    std::vector<std::string> docs;
  };
  for (const Case& c : {Case{DocumentCut::kFile, {"First paragraph,\nits second line.\n\nSecond paragraph.\nThird line",
                                                   "Another file."}},
                        Case{DocumentCut::kParagraph, {"First paragraph,\nits second line.", "Second paragraph.\nThird line",
                                                        "Another file."}},
                        Case{DocumentCut::kLine, {"First paragraph,", "its second line.", "Second paragraph.", "Third line",
                                                   "Another file."}}}) {
    o.documents = c.cut;
    o.out_dir = d.File("out" + std::to_string(static_cast<int>(c.cut)));
    auto r = Prepare(o, nullptr);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->documents, static_cast<int64_t>(c.docs.size()));
    EXPECT_EQ(DocumentsOf(r->train_path), c.docs);
    // --val-fraction 0: no validation set, nothing written for it.
    EXPECT_TRUE(r->val_path.empty());
    EXPECT_EQ(r->val_tokens, 0);
    EXPECT_FALSE(std::filesystem::exists(o.out_dir + "/val.bin"));
  }
  EXPECT_EQ(*ParseDocumentCut("line"), DocumentCut::kLine);
  EXPECT_NE(ParseDocumentCut("sentence").status().message().find("not file, paragraph or line"), absl::string_view::npos);
}

TEST(PrepareTest, JsonLinesRecordsAreDocumentsOfTheirTextField) {
  testing::TempDir d;
  ASSERT_TRUE(WriteFileAtomic(d.File("c.jsonl"), "{\"text\": \"one\\ntwo\", \"id\": 1}\n\n"
                                                  "{\"id\": 2, \"text\": \"three\"}\n{\"text\": \"\"}\n"
                                                  "{\"text\": \"caf\\u00e9\", \"body\": \"other\"}\n").ok());
  PrepareOptions o;
  o.inputs = {d.File("c.jsonl")};
  o.out_dir = d.File("out");
  o.val_fraction = 0;
  o.documents = DocumentCut::kLine;  // records are documents whatever the cut
  auto r = Prepare(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(DocumentsOf(r->train_path), (std::vector<std::string>{"one\ntwo", "three", "caf\xc3\xa9"}));
  // Another field; a record without it, or whose value is not a string, is named by line.
  o.text_field = "body";
  auto missing = Prepare(o, nullptr);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("c.jsonl:1: the record has no field \"body\""), absl::string_view::npos)
      << missing.status();
  o.text_field = "id";
  auto wrong = Prepare(o, nullptr);
  EXPECT_NE(wrong.status().message().find("c.jsonl:1: field \"id\" is number, not a string"), absl::string_view::npos)
      << wrong.status();
  ASSERT_TRUE(WriteFileAtomic(d.File("bad.ndjson"), "{\"text\": \"fine\"}\n{\"text\": \"cut off\n").ok());
  o.inputs = {d.File("bad.ndjson")};
  o.text_field = "text";
  auto bad = Prepare(o, nullptr);
  EXPECT_NE(bad.status().message().find("bad.ndjson:2: not a JSON value"), absl::string_view::npos) << bad.status();
}

TEST(PrepareTest, AValidationSetFromFilesOfItsOwnOrNone) {
  testing::TempDir d;
  std::filesystem::create_directories(d.File("train"));
  ASSERT_TRUE(WriteFileAtomic(d.File("train/a.txt"), "alpha text").ok());
  ASSERT_TRUE(WriteFileAtomic(d.File("train/b.txt"), "beta text").ok());
  ASSERT_TRUE(WriteFileAtomic(d.File("held-out.txt"), "gamma text").ok());
  PrepareOptions o;
  o.inputs = {d.File("train")};
  o.val_inputs = {d.File("held-out.txt")};
  o.out_dir = d.File("out");
  o.val_fraction = 0;
  auto r = Prepare(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(DocumentsOf(r->train_path), (std::vector<std::string>{"alpha text", "beta text"}));
  EXPECT_EQ(DocumentsOf(r->val_path), std::vector<std::string>{"gamma text"});
  EXPECT_EQ(r->files, 3);
  // Both ways of choosing the validation set at once are refused.
  o.val_fraction = 0.1;
  EXPECT_NE(Prepare(o, nullptr).status().message().find("--val and --val-fraction both"), absl::string_view::npos);
  // A split of two documents at 1 in 20 leaves val empty: the error says what to do.
  o.val_inputs.clear();
  o.val_fraction = 0.05;
  auto few = Prepare(o, nullptr);
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("2 documents are too few for a validation split of 1 in 20 (one document per "
                                        "file): give more files, cut them with --documents paragraph|line"),
            absl::string_view::npos)
      << few.status();
  o.val_fraction = 0.5;  // 1 in 2: the second document
  auto split = Prepare(o, nullptr);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(DocumentsOf(split->val_path), std::vector<std::string>{"beta text"});
  o.val_fraction = 1;
  EXPECT_NE(Prepare(o, nullptr).status().message().find("--val-fraction must be in [0, 1)"), absl::string_view::npos);
}

TEST(PrepareTest, MissingInputIsAnError) {
  PrepareOptions o;
  o.inputs = {"/nonexistent/corpus"};
  o.out_dir = "/tmp/unused";
  EXPECT_EQ(Prepare(o, nullptr).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gantry::data
