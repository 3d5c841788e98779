// Byte-level BPE against Hugging Face tokenizers (tests/reference/make_tokenizer_fixtures.py:
// a BPE that HF trained on a corpus the script made, and HF's ids for edge cases and for slices
// of that corpus): the same ids from tokenizer.json and from vocab.json + merges.txt, the text
// back from decode, and clear errors for what gantry cannot run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_util.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"
#include "data/prepare.h"
#include "data/token_file.h"
#include "data/tokenizer.h"

namespace gantry::data {
namespace {

using testing::SourcePath;

std::string Fixture(const std::string& rel) { return SourcePath("tests/reference/fixtures/tokenizer/" + rel); }

struct Case {
  std::string tokenizer, text;
  std::vector<uint32_t> ids;
  bool roundtrip = true;
};

std::vector<Case> Cases() {
  auto text = ReadFileToString(Fixture("cases.jsonl"));
  EXPECT_TRUE(text.ok()) << text.status();
  std::vector<Case> cases;
  if (!text.ok()) return cases;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    const auto j = nlohmann::json::parse(line);
    Case c;
    c.tokenizer = j.at("tokenizer").get<std::string>();
    c.text = j.at("text").get<std::string>();
    c.ids = j.at("ids").get<std::vector<uint32_t>>();
    c.roundtrip = j.value("roundtrip", true);
    cases.push_back(std::move(c));
  }
  return cases;
}

std::unique_ptr<Tokenizer> MustLoad(const std::string& path) {
  auto t = Tokenizer::Load(path);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

// A short, printable view of a case for failure messages.
std::string Show(const std::string& s) { return nlohmann::json(s.substr(0, 80)).dump(); }

TEST(TokenizerTest, IdsEqualHuggingFacesOnEdgeCasesAndTheCorpus) {
  auto bpe = MustLoad(Fixture("bpe/tokenizer.json"));
  auto prefix = MustLoad(Fixture("prefix/tokenizer.json"));
  auto llama3 = MustLoad(Fixture("llama3/tokenizer.json"));
  ASSERT_TRUE(bpe && prefix && llama3);
  const auto cases = Cases();
  ASSERT_GE(cases.size(), 370u);
  int checked = 0;
  for (const Case& c : cases) {
    const Tokenizer& t = c.tokenizer == "prefix" ? *prefix : c.tokenizer == "llama3" ? *llama3 : *bpe;
    EncodeCache cache;
    std::vector<uint32_t> got;
    t.Encode(c.text, &got, &cache);
    EXPECT_EQ(got, c.ids) << c.tokenizer << " " << Show(c.text);
    EXPECT_EQ(t.Encode(c.text), c.ids) << "without a cache: " << Show(c.text);
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(cases.size()));
}

TEST(TokenizerTest, DecodeGivesTheTextBack) {
  auto bpe = MustLoad(Fixture("bpe/tokenizer.json"));
  auto prefix = MustLoad(Fixture("prefix/tokenizer.json"));
  auto llama3 = MustLoad(Fixture("llama3/tokenizer.json"));
  ASSERT_TRUE(bpe && prefix && llama3);
  int checked = 0;
  for (const Case& c : Cases()) {
    // Where HF's decode gave the text back (not where add_prefix_space added a space).
    if (!c.roundtrip) continue;
    const Tokenizer& t = c.tokenizer == "prefix" ? *prefix : c.tokenizer == "llama3" ? *llama3 : *bpe;
    auto text = t.Decode(c.ids);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c.text) << Show(c.text);
    ++checked;
  }
  EXPECT_GE(checked, 260);
}

TEST(TokenizerTest, VocabAndMergesFilesGiveTheSameIds) {
  auto json = MustLoad(Fixture("bpe/tokenizer.json"));
  auto files = MustLoad(Fixture("bpe/vocab.json"));
  ASSERT_TRUE(json && files);
  EXPECT_EQ(files->vocab_size(), json->vocab_size());
  int compared = 0;
  for (const Case& c : Cases()) {
    // GPT-2's two files name no special tokens; "<|endoftext|>" is one (as transformers'
    // GPT2Tokenizer makes it), "<|pad|>" is text to them.
    if (c.tokenizer != "bpe" || c.text.find("<|pad|>") != std::string::npos) continue;
    EXPECT_EQ(files->Encode(c.text), c.ids) << Show(c.text);
    ++compared;
  }
  EXPECT_GE(compared, 130);
  EXPECT_EQ(files->end_of_text(), json->end_of_text());
}

TEST(TokenizerTest, AddedTokensAndEndOfText) {
  auto t = MustLoad(Fixture("bpe/tokenizer.json"));
  ASSERT_TRUE(t);
  const int64_t eot = t->end_of_text();
  ASSERT_GE(eot, 0);
  EXPECT_EQ(t->Find("<|endoftext|>"), eot);
  EXPECT_EQ(t->Encode("<|endoftext|>"), std::vector<uint32_t>{static_cast<uint32_t>(eot)});
  EXPECT_EQ(std::string(t->TokenBytes(static_cast<uint32_t>(eot))), "<|endoftext|>");
  EXPECT_EQ(t->Find("no such token at all"), -1);
  auto bad = t->Decode({t->vocab_size()});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not in"), absl::string_view::npos) << bad.status();
}

TEST(TokenizerTest, TheByteTokenizerIsTheIdentityOnBytes) {
  auto t = Tokenizer::Bytes();
  EXPECT_EQ(t->vocab_size(), 256u);
  EXPECT_EQ(t->end_of_text(), 0);
  const std::string s = "h\xC3\xA9llo \xFF";
  const auto ids = t->Encode(s);
  ASSERT_EQ(ids.size(), s.size());
  EXPECT_EQ(ids[1], 0xC3u);
  EXPECT_EQ(*t->Decode(ids), s);
}

TEST(TokenizerTest, InvalidUtf8EncodesAndDecodesAsHuggingFacesLossyDecoder) {
  auto t = MustLoad(Fixture("bpe/tokenizer.json"));
  ASSERT_TRUE(t);
  // Bytes that are no UTF-8 still have byte tokens; decode replaces each invalid run.
  const std::string s = "ok\xFF\xFE then \xE2\x82 cut";
  auto text = t->Decode(t->Encode(s));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "ok\xEF\xBF\xBD\xEF\xBF\xBD then \xEF\xBF\xBD cut");
}

TEST(TokenizerTest, ExportMakesATokenizerJsonOfGpt2sTwoFiles) {
  testing::TempDir dir;
  ASSERT_TRUE(ExportTokenizer(Fixture("bpe/vocab.json"), dir.path()).ok());
  auto files = MustLoad(Fixture("bpe/vocab.json"));
  auto made = MustLoad(dir.File("tokenizer.json"));
  ASSERT_TRUE(files && made);
  EXPECT_EQ(made->vocab_size(), files->vocab_size());
  EXPECT_EQ(made->end_of_text(), files->end_of_text());
  int compared = 0;
  for (const Case& c : Cases()) {
    if (c.tokenizer != "bpe") continue;
    EXPECT_EQ(made->Encode(c.text), files->Encode(c.text)) << Show(c.text);
    ++compared;
  }
  EXPECT_GE(compared, 130);
  EXPECT_EQ(*ReadFileToString(dir.File("merges.txt")), *ReadFileToString(Fixture("bpe/merges.txt")));
  // A tokenizer.json is copied as it is.
  testing::TempDir again;
  ASSERT_TRUE(ExportTokenizer(Fixture("llama3"), again.path()).ok());
  EXPECT_EQ(*ReadFileToString(again.File("tokenizer.json")), *ReadFileToString(Fixture("llama3/tokenizer.json")));
}

class TokenizerErrors : public ::testing::Test {
 protected:
  // The fixture tokenizer.json with one change, written to a temp file; the load's error.
  std::string LoadError(const std::function<void(nlohmann::json&)>& change) {
    auto text = ReadFileToString(Fixture("bpe/tokenizer.json"));
    EXPECT_TRUE(text.ok());
    auto j = nlohmann::json::parse(*text);
    change(j);
    const std::string path = dir_.File("tokenizer.json");
    EXPECT_TRUE(WriteFileAtomic(path, j.dump()).ok());
    auto t = Tokenizer::Load(path);
    if (t.ok()) return "loaded";
    EXPECT_NE(t.status().message().find(path), absl::string_view::npos) << "names the file: " << t.status();
    return std::string(t.status().message());
  }
  testing::TempDir dir_;
};

TEST_F(TokenizerErrors, WhatItCannotRunIsAnErrorNamingThePart) {
  EXPECT_NE(LoadError([](nlohmann::json& j) { j["normalizer"] = {{"type", "NFC"}}; }).find("normalizer NFC"),
            std::string::npos);
  EXPECT_NE(LoadError([](nlohmann::json& j) { j["model"]["type"] = "WordPiece"; }).find("model type WordPiece"),
            std::string::npos);
  EXPECT_NE(LoadError([](nlohmann::json& j) { j["model"]["byte_fallback"] = true; }).find("byte_fallback"),
            std::string::npos);
  EXPECT_NE(LoadError([](nlohmann::json& j) {
              j["pre_tokenizer"] = {{"type", "Sequence"},
                                    {"pretokenizers",
                                     {{{"type", "Split"}, {"pattern", {{"Regex", "\\d+"}}}, {"behavior", "Isolated"}},
                                      {{"type", "ByteLevel"}, {"use_regex", false}}}}};
            }).find("Split pattern \\d+"),
            std::string::npos);
  EXPECT_NE(LoadError([](nlohmann::json& j) { j["decoder"] = {{"type", "WordPiece"}}; }).find("decoder WordPiece"),
            std::string::npos);
}

TEST_F(TokenizerErrors, ABrokenFileIsAnErrorNamingIt) {
  // A byte without a token; a merge of tokens not in the vocabulary; not JSON; no file.
  EXPECT_NE(LoadError([](nlohmann::json& j) { j["model"]["vocab"].erase("!"); }).find("byte 0x21"), std::string::npos);
  EXPECT_NE(LoadError([](nlohmann::json& j) {
              j["model"]["merges"].push_back(nlohmann::json::array({"zzzq", "qqqz"}));
            }).find("not in the vocabulary"),
            std::string::npos);
  // An added token at an id the vocabulary gives another text (tests/fuzz/tokenizer_fuzz):
  // Decode would not give back what Encode read.
  EXPECT_NE(LoadError([](nlohmann::json& j) {
              j["added_tokens"].push_back({{"id", j["model"]["vocab"]["!"]}, {"content", "<|taken|>"}, {"special", true}});
            }).find("added token \"<|taken|>\" has id"),
            std::string::npos);
  const std::string path = dir_.File("broken.json");
  ASSERT_TRUE(WriteFileAtomic(path, "{\"model\": ").ok());
  auto t = Tokenizer::Load(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(path), absl::string_view::npos) << t.status();
  auto missing = Tokenizer::Load(dir_.File("nothing-here.json"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nothing-here.json"), absl::string_view::npos);
}

// Found by tests/fuzz/tokenizer_fuzz: an id sized the tokenizer's tables, so 4294967295
// wrapped id + 1 to 0 and wrote out of bounds, and ids near 2^32 asked for 128 GB; a float
// id was converted with undefined behaviour (3.5 read as 3). Each id is an integer below
// 2^24 (the largest vocabulary GPTConfig takes), in tokenizer.json's vocab and added tokens
// and in vocab.json, else an error naming the file, the token and the id.
TEST_F(TokenizerErrors, AnIdThatIsNotAnIntegerBelowTwoToThe24IsRefused) {
  const std::vector<std::pair<nlohmann::json, std::string>> ids = {
      {nlohmann::json(4294967295u), "4294967295"},
      {nlohmann::json(3.5), "3.5"},
      {nlohmann::json(1000.5), "1000.5"},  // past the vocabulary's ids (0-999): read as 1000, a new id
      {nlohmann::json(16777216), "16777216"},
      {nlohmann::json(-1), "-1"}};
  auto want = [](const std::string& path, const std::string& token, const std::string& id) {
    return absl::StrCat(path, ": token \"", token, "\" has id ", id, ", not an integer in [0, 16777216)");
  };
  const std::string json_path = dir_.File("tokenizer.json");
  for (const auto& [id, text] : ids) {
    SCOPED_TRACE(text);
    // A new token in tokenizer.json's vocabulary, and an added token.
    EXPECT_EQ(LoadError([&](nlohmann::json& j) { j["model"]["vocab"]["zzzq"] = id; }), want(json_path, "zzzq", text));
    EXPECT_EQ(LoadError([&](nlohmann::json& j) {
                j["added_tokens"].push_back({{"id", id}, {"content", "<|big|>"}, {"special", true}});
              }),
              want(json_path, "<|big|>", text));
    // GPT-2's vocab.json beside merges.txt.
    auto vocab = nlohmann::json::parse(*ReadFileToString(Fixture("bpe/vocab.json")));
    vocab["zzzq"] = id;
    const std::string vocab_path = dir_.File("vocab.json");
    ASSERT_TRUE(WriteFileAtomic(vocab_path, vocab.dump()).ok());
    ASSERT_TRUE(WriteFileAtomic(dir_.File("merges.txt"), *ReadFileToString(Fixture("bpe/merges.txt"))).ok());
    auto t = Tokenizer::Load(vocab_path);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(t.status().message()), want(vocab_path, "zzzq", text));
  }
  // The same token at the next free id is read: the errors above are the ids' alone.
  EXPECT_EQ(LoadError([](nlohmann::json& j) { j["model"]["vocab"]["zzzq"] = 1000; }), "loaded");
}

// The ids of a list of token files, end to end.
std::vector<uint32_t> ReadShards(const std::vector<std::string>& paths, int vocab) {
  std::vector<uint32_t> all;
  for (const std::string& p : paths) {
    auto f = TokenFile::Open(p, vocab);
    EXPECT_TRUE(f.ok()) << f.status();
    if (f.ok()) all.insert(all.end(), f->data(), f->data() + f->size());
  }
  return all;
}

class PrepareWithTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    // Three files of documents made of the fixture corpus's non-blank lines, four to a
    // document, documents separated by a blank line (what --documents paragraph splits a file on).
    auto corpus = ReadFileToString(Fixture("corpus.txt"));
    ASSERT_TRUE(corpus.ok());
    std::vector<std::string> lines;
    for (absl::string_view l : absl::StrSplit(*corpus, '\n')) {
      std::string line(l);
      line.erase(std::remove(line.begin(), line.end(), '\r'), line.end());
      if (line.find_first_not_of(" \t") != std::string::npos && line != "%") lines.push_back(line);
    }
    for (size_t i = 0; i + 4 <= lines.size(); i += 4) {
      docs_.push_back(absl::StrJoin(lines.begin() + static_cast<std::ptrdiff_t>(i),
                                    lines.begin() + static_cast<std::ptrdiff_t>(i + 4), "\n"));
    }
    const size_t per = docs_.size() / 3;
    for (int f = 0; f < 3; ++f) {
      inputs_.push_back(dir_.File("in" + std::to_string(f) + ".txt"));
      ASSERT_TRUE(WriteFileAtomic(inputs_.back(), absl::StrJoin(docs_.begin() + static_cast<std::ptrdiff_t>(f * per),
                                                                docs_.begin() + static_cast<std::ptrdiff_t>((f + 1) * per),
                                                                "\n\n")).ok());
    }
    docs_.resize(3 * per);
  }
  PrepareOptions Options(const std::string& out, const std::string& tokenizer) {
    PrepareOptions o;
    o.inputs = inputs_;
    o.out_dir = dir_.File(out);
    o.tokenizer = tokenizer;
    o.val_fraction = 0.1;
    o.documents = DocumentCut::kParagraph;
    return o;
  }
  testing::TempDir dir_;
  std::vector<std::string> inputs_, docs_;
};

TEST_F(PrepareWithTokenizer, ShardsHoldEachDocumentsIdsAndTheEndOfTextInOrderAtAnyThreadCount) {
  PrepareOptions o = Options("one", Fixture("bpe/tokenizer.json"));
  o.shard_tokens = 5000;
  o.threads = 1;
  int64_t last_done = -1, total = 0;
  auto r = Prepare(o, nullptr, [&](int64_t done, int64_t t) {
    EXPECT_GE(done, last_done);
    last_done = done;
    total = t;
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(last_done, total) << "the progress reaches the whole input";
  EXPECT_EQ(r->token_bytes, 2);
  EXPECT_GT(r->train_shards.size(), 2u);
  const auto train = ReadShards(r->train_shards, 1000), val = ReadShards(r->val_shards, 1000);
  EXPECT_EQ(static_cast<int64_t>(train.size()), r->train_tokens);
  for (size_t i = 0; i + 1 < r->train_shards.size(); ++i) {
    EXPECT_EQ(TokenFile::Open(r->train_shards[i], 1000)->size(), 5000u) << "every shard but the last is full";
  }
  // The same from the documents one by one: every 10th to val, each followed by <|endoftext|>.
  auto tok = MustLoad(Fixture("bpe/tokenizer.json"));
  std::vector<uint32_t> want_train, want_val;
  int64_t docs = 0;
  for (const std::string& doc : docs_) {
    auto& dst = docs % 10 == 9 ? want_val : want_train;
    tok->Encode(doc, &dst);
    dst.push_back(static_cast<uint32_t>(tok->end_of_text()));
    ++docs;
  }
  EXPECT_EQ(r->documents, docs);
  EXPECT_EQ(train, want_train);
  EXPECT_EQ(val, want_val);
  // The tokenizer is copied beside its data.
  EXPECT_TRUE(Tokenizer::Load(dir_.File("one/tokenizer.json")).ok());
  // Two threads: the same shards, byte for byte.
  PrepareOptions o2 = Options("two", Fixture("bpe/tokenizer.json"));
  o2.shard_tokens = 5000;
  o2.threads = 2;
  auto r2 = Prepare(o2, nullptr);
  ASSERT_TRUE(r2.ok()) << r2.status();
  ASSERT_EQ(r2->train_shards.size(), r->train_shards.size());
  for (size_t i = 0; i < r->train_shards.size(); ++i) {
    EXPECT_EQ(*ReadFileToString(r2->train_shards[i]), *ReadFileToString(r->train_shards[i])) << i;
  }
}

TEST_F(PrepareWithTokenizer, AVocabularyPast65536WritesUint32Ids) {
  // The fixture tokenizer with one more added token, id 70000: the files are llm.c's version 2.
  auto j = nlohmann::json::parse(*ReadFileToString(Fixture("bpe/tokenizer.json")));
  j["added_tokens"].push_back({{"id", 70000}, {"content", "<|wide|>"}, {"special", true}});
  ASSERT_TRUE(WriteFileAtomic(dir_.File("wide.json"), j.dump()).ok());
  ASSERT_TRUE(WriteFileAtomic(inputs_[0], "a <|wide|> token past 65535\n\nand more text\n\nand a third\n").ok());
  PrepareOptions o = Options("wide", dir_.File("wide.json"));
  o.inputs = {inputs_[0]};
  o.val_fraction = 0.5;
  auto r = Prepare(o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->vocab_size, 70001u);
  EXPECT_EQ(r->token_bytes, 4);
  auto bytes = ReadFileToString(r->train_path);
  int32_t version = 0;
  std::memcpy(&version, bytes->data() + 4, 4);
  EXPECT_EQ(version, kTokenFileVersionWide);
  const auto ids = ReadShards(r->train_shards, 70001);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 70000u), ids.end());
  // Read with a smaller vocabulary, the id is named as outside it.
  auto small = TokenFile::Open(r->train_path, 1000);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("token 70000"), absl::string_view::npos) << small.status();
  // A truncated version-2 file: named, and says so.
  ASSERT_TRUE(WriteFileAtomic(dir_.File("cut.bin"), bytes->substr(0, bytes->size() - 2)).ok());
  auto cut = TokenFile::Open(dir_.File("cut.bin"), 0);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("truncated"), absl::string_view::npos) << cut.status();
}

TEST_F(PrepareWithTokenizer, TheEndOfTextMustBeAToken) {
  PrepareOptions o = Options("eot", Fixture("bpe/tokenizer.json"));
  o.eot = "<|no such|>";
  auto r = Prepare(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--eot <|no such|>"), absl::string_view::npos) << r.status();
  o.eot = "<|pad|>";
  auto padded = Prepare(o, nullptr);
  ASSERT_TRUE(padded.ok()) << padded.status();
  const auto ids = ReadShards(padded->val_shards, 1000);
  EXPECT_EQ(ids.back(), 1u) << "each document ends with <|pad|>, id 1";
  // A tokenizer without <|endoftext|> or <|end_of_text|> needs --eot.
  auto j = nlohmann::json::parse(*ReadFileToString(Fixture("bpe/tokenizer.json")));
  j["added_tokens"] = nlohmann::json::array();
  j["model"]["vocab"].erase("<|endoftext|>");
  ASSERT_TRUE(WriteFileAtomic(dir_.File("no-eot.json"), j.dump()).ok());
  auto none = Prepare(Options("none", dir_.File("no-eot.json")), nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--eot"), absl::string_view::npos) << none.status();
}

}  // namespace
}  // namespace gantry::data
