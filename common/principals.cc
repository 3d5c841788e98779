#include "common/principals.h"

#include <glog/logging.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "yaml-cpp/yaml.h"

namespace gantry {

absl::string_view KindName(PrincipalKind kind) {
  switch (kind) {
    case PrincipalKind::kUser:
      return "user";
    case PrincipalKind::kWorker:
      return "worker";
    case PrincipalKind::kShardServer:
      return "shardserver";
  }
  return "?";
}

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kNone:
      return "";
    case Role::kViewer:
      return "viewer";
    case Role::kUser:
      return "user";
    case Role::kAdmin:
      return "admin";
  }
  return "?";
}

std::string Principal::Describe() const {
  if (kind != PrincipalKind::kUser) return absl::StrCat(KindName(kind), " ", name);
  return absl::StrCat("user ", name, " (", team.empty() ? "" : absl::StrCat("team ", team, ", "), "role ",
                      RoleName(role), ")");
}

Principal LaptopPrincipal() {
  Principal p;
  p.name = "anonymous";
  p.role = Role::kAdmin;
  p.via = "none";
  return p;
}

Principal ClusterTokenPrincipal() {
  Principal p;
  p.name = "cluster-token";
  p.role = Role::kAdmin;
  p.via = "cluster token";
  return p;
}

Sha256Digest Sha256(absl::string_view data) {
  Sha256Digest d{};
  unsigned int n = 0;
  // EVP_Digest with SHA-256 cannot fail short of an allocation failure, which OpenSSL reports
  // by returning 0: a true invariant.
  CHECK_EQ(EVP_Digest(data.data(), data.size(), d.data(), &n, EVP_sha256(), nullptr), 1);
  CHECK_EQ(n, d.size());
  return d;
}

std::string Sha256Hex(absl::string_view data) {
  static constexpr char kHex[] = "0123456789abcdef";
  const Sha256Digest d = Sha256(data);
  std::string out(64, '0');
  for (size_t i = 0; i < d.size(); ++i) {
    out[2 * i] = kHex[d[i] >> 4];
    out[2 * i + 1] = kHex[d[i] & 15];
  }
  return out;
}

bool SameDigest(const Sha256Digest& a, const Sha256Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

namespace {

constexpr size_t kMaxName = 128;
constexpr size_t kMaxCertificateName = 256;

// Names (users, services, teams) appear in messages, logs and job records: no spaces, no
// control characters, nothing a shell or a table would mangle.
bool IsName(const std::string& s) {
  if (s.empty() || s.size() > kMaxName) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '@' && c != '-') {
      return false;
    }
  }
  return true;
}

// A certificate's CN or SAN: printable, spaces allowed ("gantry client"), UTF-8 bytes too.
bool IsCertificateName(const std::string& s) {
  if (s.empty() || s.size() > kMaxCertificateName) return false;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return false;
  }
  return s.front() != ' ' && s.back() != ' ';
}

bool ParseHexDigest(const std::string& s, Sha256Digest* d) {
  if (s.size() != 64) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < 32; ++i) {
    const int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    (*d)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

// The parser of one file: errors are "SOURCE:LINE: FIELD: why".
class Parser {
 public:
  explicit Parser(absl::string_view source) : source_(source) {}

  absl::Status Error(const YAML::Node& at, int fallback_line, const std::string& field, const std::string& why) const {
    int line = fallback_line;
    if (at.IsDefined() && !at.Mark().is_null()) line = at.Mark().line + 1;
    return absl::InvalidArgumentError(absl::StrCat(source_, ":", line, ": ", field, ": ", why));
  }

  absl::StatusOr<std::string> Scalar(const YAML::Node& n, int line, const std::string& field) const {
    if (!n.IsScalar()) return Error(n, line, field, absl::StrCat("must be a single value, not ", Show(n)));
    return n.Scalar();
  }

  // A node as an error may show it: what kind of node it is, or a scalar that is one short
  // word (Showable). token_sha256's value is never shown.
  static std::string Show(const YAML::Node& n) {
    if (n.IsNull()) return "nothing";
    if (n.IsMap()) return "a mapping";
    if (n.IsSequence()) return "a sequence";
    return ShowText(n.Scalar());
  }
  static std::string ShowText(const std::string& s) {
    if (Showable(s)) return absl::StrCat("'", s, "'");
    return absl::StrCat("a value of ", s.size(), " characters (not shown)");
  }
  // A key as a field's name shows it (ShowText's rule).
  static std::string ShowKey(const std::string& key) {
    return Showable(key) ? key : absl::StrCat("(a field name of ", key.size(), " characters, not shown)");
  }

 private:
  // Errors are logged: no scalar that might be a token, pasted in the wrong place or folded
  // into a neighbouring line by a missing colon ("token_sha256 s3cr3t" continues the line
  // above it), is shown. Tokens are long; a folded line holds a space.
  static bool Showable(const std::string& s) {
    if (s.empty() || s.size() > kMaxShown) return false;
    for (char c : s) {
      if (c <= ' ' || c > '~') return false;
    }
    return true;
  }
  static constexpr size_t kMaxShown = 24;

  std::string source_;
};

// Each field of a mapping, checked against the known names (an unknown or repeated one is an
// error naming it): fn(key, field, value, value's line).
absl::Status ForEachField(
    const Parser& p, const YAML::Node& node, int line, const std::string& at, const std::vector<std::string>& known,
    const std::function<absl::Status(const std::string&, const std::string&, const YAML::Node&, int)>& fn) {
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    // Copies: it-> is a proxy whose pair lives only as long as the expression (yaml-cpp).
    const YAML::Node key_node = it->first, v = it->second;
    if (!key_node.IsScalar()) {
      return p.Error(key_node, line, at, absl::StrCat("has a key that is not a name (", Parser::Show(key_node), ")"));
    }
    const std::string key = key_node.Scalar();
    const std::string field = absl::StrCat(at, ".", Parser::ShowKey(key));
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return p.Error(key_node, line, field, absl::StrCat("unknown field (known: ", absl::StrJoin(known, ", "), ")"));
    }
    if (!seen.insert(key).second) return p.Error(key_node, line, field, "appears twice");
    if (auto s = fn(key, field, v, key_node.Mark().is_null() ? line : key_node.Mark().line + 1); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// One identity as read, before the file's cross-checks (names, tokens, certificates unique).
struct ParsedEntry {
  Principal principal;
  bool has_token = false;
  Sha256Digest digest{};
  std::string certificate;
  int line = 0;
};

absl::Status ReadEntry(const Parser& p, const YAML::Node& node, int parent_line, const std::string& at,
                       bool service, ParsedEntry* e) {
  if (!node.IsMap()) {
    return p.Error(node, parent_line, at,
                   absl::StrCat("must be a mapping (name, ", service ? "kind" : "team, role",
                                ", token_sha256 and/or certificate), not ", Parser::Show(node)));
  }
  const int line = node.Mark().is_null() ? parent_line : node.Mark().line + 1;
  e->line = line;
  e->principal.kind = PrincipalKind::kUser;
  const std::vector<std::string> known = service
                                             ? std::vector<std::string>{"name", "kind", "token_sha256", "certificate"}
                                             : std::vector<std::string>{"name", "team", "role", "token_sha256",
                                                                        "certificate"};
  bool has_kind = false, has_role = false;
  auto field_of = [&](const std::string& key, const std::string& field, const YAML::Node& v, int vline) -> absl::Status {
    if (key == "token_sha256") {
      // Never shown: a token pasted here by mistake must not reach a log.
      if (!v.IsScalar() || !ParseHexDigest(v.Scalar(), &e->digest)) {
        return p.Error(v, vline, field,
                       "must be the token's SHA-256 as 64 hex digits (`gantry principals hash` prints it); the value "
                       "is not shown");
      }
      e->has_token = true;
      return absl::OkStatus();
    }
    auto s = p.Scalar(v, vline, field);
    if (!s.ok()) return s.status();
    if (key == "name") {
      if (!IsName(*s)) {
        return p.Error(v, vline, field,
                       absl::StrCat(Parser::Show(v), " is not a name (1 to 128 letters, digits, '.', '_', '@', '-')"));
      }
      e->principal.name = *s;
    } else if (key == "team") {
      if (!IsName(*s)) {
        return p.Error(v, vline, field,
                       absl::StrCat(Parser::Show(v), " is not a team name (1 to 128 letters, digits, '.', '_', '@', '-')"));
      }
      e->principal.team = *s;
    } else if (key == "role") {
      has_role = true;
      if (*s == "admin") e->principal.role = Role::kAdmin;
      else if (*s == "user") e->principal.role = Role::kUser;
      else if (*s == "viewer") e->principal.role = Role::kViewer;
      else return p.Error(v, vline, field, absl::StrCat("unknown role ", Parser::Show(v), " (admin, user, viewer)"));
    } else if (key == "kind") {
      has_kind = true;
      if (*s == "worker") e->principal.kind = PrincipalKind::kWorker;
      else if (*s == "shardserver") e->principal.kind = PrincipalKind::kShardServer;
      else return p.Error(v, vline, field, absl::StrCat("unknown kind ", Parser::Show(v), " (worker, shardserver)"));
    } else if (key == "certificate") {
      if (!IsCertificateName(*s)) {
        return p.Error(v, vline, field,
                       "must be the name a client certificate carries as its CN or a SAN (1 to 256 printable "
                       "characters, no leading or trailing space)");
      }
      e->certificate = *s;
    }
    return absl::OkStatus();
  };
  if (auto s = ForEachField(p, node, line, at, known, field_of); !s.ok()) return s;
  if (e->principal.name.empty()) return p.Error(node, line, absl::StrCat(at, ".name"), "is required");
  if (service && !has_kind) return p.Error(node, line, absl::StrCat(at, ".kind"), "is required (worker, shardserver)");
  if (!service && !has_role) return p.Error(node, line, absl::StrCat(at, ".role"), "is required (admin, user, viewer)");
  if (!service && e->principal.role == Role::kUser && e->principal.team.empty()) {
    return p.Error(node, line, absl::StrCat(at, ".team"), "is required for role user");
  }
  if (!e->has_token && e->certificate.empty()) {
    return p.Error(node, line, at,
                   absl::StrCat(e->principal.name, " needs token_sha256 or certificate (or both) to be recognised"));
  }
  return absl::OkStatus();
}

// A whole number >= min, as a quota or cap is given.
absl::StatusOr<int64_t> ReadCount(const Parser& p, const YAML::Node& v, int line, const std::string& field,
                                  int64_t min) {
  auto s = p.Scalar(v, line, field);
  if (!s.ok()) return s.status();
  int64_t n = 0;
  size_t used = 0;
  try {
    n = std::stoll(*s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s->size() || n < min || n > (int64_t{1} << 40)) {
    return p.Error(v, line, field,
                   absl::StrCat(Parser::Show(v), " is not a whole number of ", min, " or more"));
  }
  return n;
}

// A mapping of device kind to a whole number of slots (a team's quota, borrowing_limit,
// lending_limit): each kind's node kept for later checks' errors.
absl::Status ReadKindCounts(const Parser& p, const YAML::Node& v, int vline, const std::string& field,
                            std::map<std::string, int64_t>* out, std::map<std::string, YAML::Node>* nodes) {
  if (!v.IsMap()) {
    return p.Error(v, vline, field,
                   absl::StrCat("must be a mapping of device kind to slots ({cuda: 16, cpu: 4}), not ", Parser::Show(v)));
  }
  for (auto q = v.begin(); q != v.end(); ++q) {
    const YAML::Node kind_node = q->first, n = q->second;
    const std::string kind = kind_node.IsScalar() ? kind_node.Scalar() : "";
    const std::string kfield = absl::StrCat(field, ".", Parser::ShowKey(kind));
    const int kl = kind_node.Mark().is_null() ? vline : kind_node.Mark().line + 1;
    if (kind != "cpu" && kind != "cuda" && kind != "cuda-emulated") {
      return p.Error(kind_node, kl, kfield, "unknown device kind (cpu, cuda, cuda-emulated)");
    }
    if (out->count(kind)) return p.Error(kind_node, kl, kfield, "appears twice");
    auto count = ReadCount(p, n, kl, kfield, 0);
    if (!count.ok()) return count.status();
    (*out)[kind] = *count;
    (*nodes)[kind] = kind_node;
  }
  return absl::OkStatus();
}

// One entry of teams:.
absl::Status ReadTeam(const Parser& p, const YAML::Node& node, int parent_line, const std::string& at, TeamQuota* t) {
  if (!node.IsMap()) {
    return p.Error(node, parent_line, at,
                   absl::StrCat("must be a mapping (name, quota, max_running_jobs, cohort, borrowing_limit, "
                                "lending_limit), not ",
                                Parser::Show(node)));
  }
  const int line = node.Mark().is_null() ? parent_line : node.Mark().line + 1;
  t->line = line;
  const std::vector<std::string> known = {"name",   "quota",           "max_running_jobs",
                                          "cohort", "borrowing_limit", "lending_limit"};
  std::set<std::string> seen;
  std::map<std::string, YAML::Node> quota_nodes;
  struct Limit {
    std::string field;                        // "teams[0].borrowing_limit"
    int line = 0;
    std::map<std::string, YAML::Node> kinds;  // each kind's node
  };
  std::map<std::string, Limit> limits;  // by key
  auto field_of = [&](const std::string& key, const std::string& field, const YAML::Node& v, int vline) -> absl::Status {
    seen.insert(key);
    if (key == "name" || key == "cohort") {  // a team's or a cohort's name
      auto s = p.Scalar(v, vline, field);
      if (!s.ok()) return s.status();
      if (!IsName(*s)) {
        return p.Error(v, vline, field,
                       absl::StrCat(Parser::Show(v), " is not a ", key == "name" ? "team" : "cohort",
                                    " name (1 to 128 letters, digits, '.', '_', '@', '-')"));
      }
      (key == "name" ? t->team : t->cohort) = *s;
    } else if (key == "quota") {
      return ReadKindCounts(p, v, vline, field, &t->nominal, &quota_nodes);
    } else if (key == "borrowing_limit" || key == "lending_limit") {
      Limit& l = limits[key];
      l.field = field;
      l.line = vline;
      return ReadKindCounts(p, v, vline, field, key == "borrowing_limit" ? &t->borrowing_limit : &t->lending_limit,
                            &l.kinds);
    } else {  // max_running_jobs
      auto count = ReadCount(p, v, vline, field, 1);
      if (!count.ok()) return count.status();
      t->max_running_jobs = *count;
    }
    return absl::OkStatus();
  };
  if (auto s = ForEachField(p, node, line, at, known, field_of); !s.ok()) return s;
  if (t->team.empty()) return p.Error(node, line, absl::StrCat(at, ".name"), "is required");
  if (!seen.count("quota") && !seen.count("max_running_jobs")) {
    return p.Error(node, line, at, absl::StrCat("team ", t->team, " names neither quota nor max_running_jobs"));
  }
  // The limits (Kueue's borrowingLimit and lendingLimit): of a kind the team's quota names, in
  // a cohort; a team lends at most its quota.
  for (const auto& [key, l] : limits) {
    const bool borrowing = key == "borrowing_limit";
    if (t->cohort.empty()) {
      return p.Error(YAML::Node(), l.line, l.field,
                     absl::StrCat("team ", t->team, " has no cohort to ", borrowing ? "borrow from" : "lend to",
                                  " (set cohort, or remove ", key, ")"));
    }
    for (const auto& [kind, kind_node] : l.kinds) {
      const std::string kfield = absl::StrCat(l.field, ".", kind);
      auto n = t->nominal.find(kind);
      if (n == t->nominal.end()) {
        return p.Error(kind_node, l.line, kfield,
                       absl::StrCat("team ", t->team, "'s quota does not name ", kind,
                                    " (a kind without a quota is not limited, and neither borrows nor lends)"));
      }
      if (!borrowing && t->lending_limit.at(kind) > n->second) {
        return p.Error(kind_node, l.line, kfield,
                       absl::StrCat(t->lending_limit.at(kind), " is more than team ", t->team, "'s quota of ",
                                    n->second, " (a team lends only of its own quota)"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PrincipalSet> PrincipalSet::Parse(absl::string_view text, absl::string_view source) {
  const Parser p(source);
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.is_null() ? 1 : e.mark.line + 1, ": not valid YAML: ", e.msg));
  }
  if (!root.IsDefined() || root.IsNull()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":1: (top level): the file names no identity (users, services)"));
  }
  if (!root.IsMap()) {
    return p.Error(root, 1, "(top level)", absl::StrCat("must be a mapping with users and services, not ", Parser::Show(root)));
  }
  std::vector<ParsedEntry> parsed;
  TeamQuotas teams;
  std::set<std::string> sections;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const YAML::Node key_node = it->first, list = it->second;  // copies, as in ReadEntry
    if (!key_node.IsScalar()) {
      return p.Error(key_node, 1, "(top level)", absl::StrCat("has a key that is not a name (", Parser::Show(key_node), ")"));
    }
    const std::string key = key_node.Scalar();
    const int kline = key_node.Mark().is_null() ? 1 : key_node.Mark().line + 1;
    if (key != "users" && key != "services" && key != "teams") {
      return p.Error(key_node, 1, Parser::ShowKey(key), "unknown field (known: services, teams, users)");
    }
    if (!sections.insert(key).second) return p.Error(key_node, 1, key, "appears twice");
    if (list.IsNull()) continue;  // "users:" with nothing under it
    if (!list.IsSequence()) {
      return p.Error(list, kline, key,
                     absl::StrCat("must be a list of ", key == "teams" ? "teams" : "identities", ", not ",
                                  Parser::Show(list)));
    }
    if (key == "teams") {
      for (size_t i = 0; i < list.size(); ++i) {
        TeamQuota t;
        const YAML::Node item = list[i];
        if (auto s = ReadTeam(p, item, kline, absl::StrCat("teams[", i, "]"), &t); !s.ok()) return s;
        if (auto it = teams.find(t.team); it != teams.end()) {
          return absl::InvalidArgumentError(absl::StrCat(source, ":", t.line, ": teams[", i, "].name: team '", t.team,
                                                         "' is already named at line ", it->second.line));
        }
        teams.emplace(t.team, std::move(t));
      }
      continue;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      ParsedEntry e;
      const YAML::Node item = list[i];
      if (auto s = ReadEntry(p, item, kline, absl::StrCat(key, "[", i, "]"), key == "services", &e); !s.ok()) return s;
      e.principal.via.clear();
      parsed.push_back(std::move(e));
    }
  }
  if (parsed.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":1: (top level): the file names no identity (users, services)"));
  }
  // Users first, in file order (the sections may come in either order).
  std::stable_partition(parsed.begin(), parsed.end(),
                        [](const ParsedEntry& e) { return e.principal.kind == PrincipalKind::kUser; });
  std::map<std::string, const ParsedEntry*> names, certificates;
  for (size_t i = 0; i < parsed.size(); ++i) {
    const ParsedEntry& e = parsed[i];
    auto where = [&](const ParsedEntry& o) { return absl::StrCat(o.principal.name, ", line ", o.line); };
    if (auto [it, fresh] = names.emplace(e.principal.name, &e); !fresh) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", e.line, ": name: '", e.principal.name,
                                                     "' is already the name of the identity at line ", it->second->line));
    }
    if (!e.certificate.empty()) {
      if (auto [it, fresh] = certificates.emplace(e.certificate, &e); !fresh) {
        return absl::InvalidArgumentError(absl::StrCat(source, ":", e.line, ": certificate: ", e.principal.name,
                                                       " has the certificate name of ", where(*it->second),
                                                       ": each identity needs its own"));
      }
    }
    if (!e.has_token) continue;
    for (size_t j = 0; j < i; ++j) {
      if (parsed[j].has_token && SameDigest(parsed[j].digest, e.digest)) {
        return absl::InvalidArgumentError(absl::StrCat(source, ":", e.line, ": token_sha256: ", e.principal.name,
                                                       " has the same token as ", where(parsed[j]),
                                                       ": each identity needs its own token"));
      }
    }
  }
  PrincipalSet set;
  set.teams_ = std::move(teams);
  for (auto& e : parsed) {
    Entry entry;
    entry.principal = e.principal;
    entry.has_token = e.has_token;
    entry.digest = e.digest;
    entry.certificate = e.certificate;
    set.entries_.push_back(std::move(entry));
  }
  for (const Entry& e : set.entries_) {
    set.by_token_.push_back(e.principal);
    set.by_token_.back().via = "token";
    set.by_certificate_.push_back(e.principal);
    set.by_certificate_.back().via = "certificate";
  }
  return set;
}

const Principal* PrincipalSet::FindByDigest(const Sha256Digest& digest, int* compared) const {
  // Every entry is compared, whichever matches: the time taken does not say which did.
  const Principal* found = nullptr;
  int n = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!entries_[i].has_token) continue;
    ++n;
    const bool same = SameDigest(entries_[i].digest, digest);
    if (same) found = &by_token_[i];
  }
  if (compared != nullptr) *compared = n;
  return found;
}

const Principal* PrincipalSet::FindByToken(absl::string_view token, int* compared) const {
  return FindByDigest(Sha256(token), compared);
}

const Principal* PrincipalSet::FindByCertificateName(absl::string_view name) const {
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!entries_[i].certificate.empty() && entries_[i].certificate == name) return &by_certificate_[i];
  }
  return nullptr;
}

std::vector<Principal> PrincipalSet::principals() const {
  std::vector<Principal> out;
  for (const Entry& e : entries_) out.push_back(e.principal);
  return out;
}

size_t PrincipalSet::with_certificate() const {
  size_t n = 0;
  for (const Entry& e : entries_) n += e.certificate.empty() ? 0 : 1;
  return n;
}

absl::StatusOr<PrincipalSet> PrincipalsFile::Read(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("principals file ", path, ": ", text.status().message()));
  }
  return PrincipalSet::Parse(*text, path);
}

absl::StatusOr<std::unique_ptr<PrincipalsFile>> PrincipalsFile::Load(std::string path) {
  auto set = Read(path);
  if (!set.ok()) return set.status();
  std::unique_ptr<PrincipalsFile> f(new PrincipalsFile(std::move(path)));
  f->current_ = std::make_shared<const PrincipalSet>(*std::move(set));
  return f;
}

absl::Status PrincipalsFile::Reload() {
  auto set = Read(path_);
  if (!set.ok()) {
    LOG(ERROR) << "principals: the reload failed, the previous file stays in force: " << set.status().message();
    return set.status();
  }
  const size_t n = set->size();
  {
    absl::MutexLock l(&mu_);
    current_ = std::make_shared<const PrincipalSet>(*std::move(set));
  }
  LOG(INFO) << "principals: reloaded " << path_ << ": " << n << " identities";
  return absl::OkStatus();
}

std::shared_ptr<const PrincipalSet> PrincipalsFile::current() const {
  absl::MutexLock l(&mu_);
  return current_;
}

}  // namespace gantry
