// The principals file parser (common/principals.h) on arbitrary text, as the coordinator and
// the shard servers read the file at start and on SIGHUP (PrincipalSet::Parse).
//
// Beyond "no crash": a refused file's error is INVALID_ARGUMENT "principals.yaml:LINE: ..."
// with LINE a line of the text (or the one past its end), and it never shows a token_sha256
// value (a token pasted there by mistake must not reach a log). An accepted file names at
// least one identity, users first; names are unique and valid; a user has a role (and a team
// for role user), a service none; a token no identity has finds nobody, after comparing as
// many identities as any other token does. An accepted team has a name, known device kinds,
// counts of 0 or more, and a cohort that is absent or a name; its borrowing and lending limits
// are of kinds its quota names, in a cohort, 0 or more, and a lending limit is no more than the
// quota.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "common/principals.h"

namespace {

[[noreturn]] void Fail(const std::string& what, const std::string& text) {
  std::fprintf(stderr, "principals_fuzz: %s\n--- file ---\n%s\n------------\n", what.c_str(), text.c_str());
  std::abort();
}

// The values written after "token_sha256:" on a line, trimmed, that look like tokens (one
// word of letters, digits, '-' and '_', longer than the errors' longest shown value: 24
// characters), that occur once in the text (a value that also appears as, say, a name may rightly be shown as the name).
std::set<std::string> TokenValues(const std::string& text) {
  std::set<std::string> out;
  const std::string key = "token_sha256:";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
    const size_t start = at + key.size();
    const size_t end = text.find_first_of("\n\r,}", start);
    std::string v(absl::StripAsciiWhitespace(text.substr(start, end == std::string::npos ? std::string::npos : end - start)));
    if (v.size() <= 24) continue;
    bool word = true;  // a token is one word ("alid YAML: illegal map valu" is the parser's own text)
    for (char c : v) word = word && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_');
    if (!word) continue;
    if (text.find(v) != text.rfind(v)) continue;
    out.insert(v);
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gantry;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto set = PrincipalSet::Parse(text, "principals.yaml");
  if (!set.ok()) {
    const std::string msg(set.status().message());
    if (set.status().code() != absl::StatusCode::kInvalidArgument || msg.rfind("principals.yaml:", 0) != 0) {
      Fail("a refused file's error is not INVALID_ARGUMENT 'principals.yaml:LINE: ...': " + set.status().ToString(), text);
    }
    const size_t colon = msg.find(':', 16);
    int line = 0;
    if (colon == std::string::npos || !absl::SimpleAtoi(msg.substr(16, colon - 16), &line)) {
      Fail("the error names no line: " + msg, text);
    }
    size_t lines = 1;
    for (char c : text) lines += c == '\n' || c == '\r' ? 1 : 0;  // yaml-cpp counts \r\n as one: at most this
    if (line < 1 || static_cast<size_t>(line) > lines + 1) {
      Fail("the error's line is outside the file (" + std::to_string(lines) + " lines): " + msg, text);
    }
    for (const std::string& v : TokenValues(text)) {
      if (msg.find(v) != std::string::npos) Fail("the error shows a token_sha256 value '" + v + "': " + msg, text);
    }
    return 0;
  }
  const auto all = set->principals();
  if (all.empty() || all.size() != set->size()) Fail("an accepted file with no identity", text);
  std::set<std::string> names;
  bool services = false;
  for (const Principal& p : all) {
    if (!names.insert(p.name).second) Fail("two identities named " + p.name, text);
    if (p.name.empty() || p.name.size() > 128) Fail("a bad name was accepted: " + p.name, text);
    for (char c : p.name) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '@' && c != '-') {
        Fail("a bad name was accepted: " + p.name, text);
      }
    }
    const bool service = p.kind != PrincipalKind::kUser;
    if (services && !service) Fail("a user after a service: users come first", text);
    services = services || service;
    if (service != (p.role == Role::kNone)) Fail(p.name + ": a service with a role, or a user without one", text);
    if (p.kind == PrincipalKind::kUser && p.role == Role::kUser && p.team.empty()) Fail(p.name + ": role user without a team", text);
  }
  // A name finds an identity by certificate only where the file gives that certificate name.
  for (const std::string& n : names) {
    const Principal* p = set->FindByCertificateName(n);
    if (p != nullptr && p->via != "certificate") Fail("a certificate's principal without via=certificate", text);
  }
  if (set->with_certificate() > set->size()) Fail("more certificates than identities", text);
  int compared = -1;
  if (set->FindByToken("principals_fuzz: a token no file has", &compared) != nullptr) Fail("an unknown token found someone", text);
  if (compared < 0 || static_cast<size_t>(compared) > set->size()) Fail("compared a wrong number of identities", text);
  int again = -1;
  (void)set->FindByToken("", &again);
  if (again != compared) Fail("the number of comparisons depends on the token", text);
  // Teams (quotas): a name, known device kinds, counts a scheduler can use.
  for (const auto& [team, q] : set->teams()) {
    if (team.empty() || team != q.team || q.line < 1) Fail("a team without its name or line: " + team, text);
    if (q.max_running_jobs < 0) Fail(team + ": a negative cap was accepted", text);
    if (q.nominal.empty() && q.max_running_jobs == 0) Fail(team + ": a team with neither quota nor cap", text);
    for (const auto& [kind, n] : q.nominal) {
      if (kind != "cpu" && kind != "cuda" && kind != "cuda-emulated") Fail(team + ": an unknown kind " + kind, text);
      if (n < 0) Fail(team + ": a negative quota was accepted", text);
    }
    // A cohort is absent or a name, as a team's is.
    if (q.cohort.size() > 128) Fail(team + ": a cohort name over 128 characters was accepted", text);
    for (char c : q.cohort) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '@' && c != '-') {
        Fail(team + ": a bad cohort name was accepted: " + q.cohort, text);
      }
    }
    for (const auto* limits : {&q.borrowing_limit, &q.lending_limit}) {
      if (!limits->empty() && q.cohort.empty()) Fail(team + ": a limit without a cohort was accepted", text);
      for (const auto& [kind, n] : *limits) {
        auto nominal = q.nominal.find(kind);
        if (nominal == q.nominal.end()) Fail(team + ": a limit of a kind without a quota: " + kind, text);
        if (n < 0) Fail(team + ": a negative limit was accepted", text);
        if (limits == &q.lending_limit && n > nominal->second) Fail(team + ": lends more than its quota", text);
      }
    }
  }
  return 0;
}
