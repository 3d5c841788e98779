// Tokenizers (data/tokenizer.h) from arbitrary files, loaded as `prepare
// --tokenizer` and export load them (Tokenizer::Load of a path), then run: a text encoded
// and the ids decoded. The input is tokenizer.json, optionally followed by further files
// and the text to encode (fuzz_util.h, SplitFiles):
//   {"model": {"type": "BPE", "vocab": {...}, "merges": [...]}, ...}
//   %%file text
//   Hello world
// When the files hold a vocab.json (GPT-2's vocab.json + merges.txt), that pair is loaded
// instead of tokenizer.json.
//
// Beyond "no crash": every id Encode gives is inside the vocabulary, and Decode takes back
// what Encode gave: valid UTF-8 text comes back exactly, unless the tokenizer itself drops
// or adds text (an added token's lstrip/rstrip eats the spaces beside it, add_prefix_space
// adds one), as Hugging Face's does.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_util.h"
#include "data/tokenizer.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "tokenizer_fuzz: %s\n", what.c_str());
  std::abort();
}

// Whether a tokenizer.json (one that loaded) keeps text as it is: no added token strips the
// spaces beside it and no pre-tokenizer adds a space in front.
bool KeepsText(const std::string& json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return true;
  auto adds_space = [](const nlohmann::json& p) {
    return p.is_object() && p.contains("add_prefix_space") && p["add_prefix_space"] == true;
  };
  if (j.contains("pre_tokenizer")) {
    const nlohmann::json& pre = j["pre_tokenizer"];
    if (adds_space(pre)) return false;
    if (pre.is_object() && pre.contains("pretokenizers") && pre["pretokenizers"].is_array()) {
      for (const auto& p : pre["pretokenizers"]) {
        if (adds_space(p)) return false;
      }
    }
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& a : j["added_tokens"]) {
      if (a.is_object() && ((a.contains("lstrip") && a["lstrip"] == true) || (a.contains("rstrip") && a["rstrip"] == true))) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry;
  auto files = fuzz::SplitFiles(absl::string_view(reinterpret_cast<const char*>(data), size), "tokenizer.json");
  std::string text = "Hello world, it's 2026! \xE4\xBD\xA0\xE5\xA5\xBD <|endoftext|>  x\n\n";
  bool vocab_json = false;
  std::string json;
  for (auto it = files.begin(); it != files.end();) {
    if (it->first == "text") {
      text = it->second;
      it = files.erase(it);
      continue;
    }
    vocab_json |= it->first == "vocab.json";
    if (it->first == "tokenizer.json") json = it->second;
    ++it;
  }
  const std::string dir = fuzz::WriteScratchDir("tok", files);
  auto tok = data::Tokenizer::Load(vocab_json ? dir + "/vocab.json" : dir + "/tokenizer.json");
  if (!tok.ok()) return 0;
  const data::Tokenizer& t = **tok;
  const bool keeps_text = vocab_json || KeepsText(json);
  data::EncodeCache cache;
  for (int pass = 0; pass < 2; ++pass) {  // the second pass from the cache
    std::vector<uint32_t> ids;
    t.Encode(text, &ids, &cache);
    if (!text.empty() && ids.empty()) Fail("a non-empty text encoded to no ids");
    for (uint32_t id : ids) {
      if (id >= t.vocab_size()) Fail("Encode gave id " + std::to_string(id) + " outside the vocabulary");
    }
    auto back = t.Decode(ids);
    if (!back.ok()) Fail("Decode refused Encode's ids: " + back.status().ToString());
    if (keeps_text && fuzz::ValidUtf8(text) && *back != text) Fail("Decode(Encode(text)) is not the text");
  }
  (void)t.Find("<|endoftext|>");
  (void)t.TokenText(0);
  (void)t.Decode(std::vector<uint32_t>{t.vocab_size()});  // out of range: refused
  return 0;
}
