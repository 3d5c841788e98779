// Who may call a Gantry cluster: the principals file (users with a team and a role, service
// identities for workers and shard servers), read by the coordinator and the shard servers
// at start and again on SIGHUP. Its YAML:
//
//   users:
//     - name: alice                 # names: letters, digits and . _ @ -, up to 128
//       team: vision                # required for role user; optional for admin, viewer
//       role: user                  # admin | user | viewer
//       token_sha256: 3b1f...       # SHA-256 of the token, 64 hex digits (gantry principals hash)
//     - name: bob
//       role: admin
//       certificate: bob.ops.example.org   # a verified client certificate whose CN or a SAN
//                                          # (DNS, URI, e-mail) is this names bob
//   services:
//     - name: gpu-pool-a
//       kind: worker                # worker | shardserver
//       token_sha256: 9e0c...
//   teams:                          # optional: quotas (coordinator/quota.h); none: no limits
//     - name: vision
//       quota: {cuda: 16, cpu: 4}   # nominal slots per device kind (GPUs; cpu workers)
//       max_running_jobs: 3         # optional cap on the team's placed jobs
//       cohort: research            # optional: borrows the idle quota of the cohort's other teams
//       borrowing_limit: {cuda: 4}  # optional: at most this many slots beyond its quota (Kueue's)
//       lending_limit: {cuda: 8}    # optional: lends at most this many of its idle quota
//
// Every identity has a token hash, a certificate name or both. Tokens are never stored,
// only their SHA-256; a presented token is hashed and compared with every identity's hash
// in constant time (CRYPTO_memcmp, no early exit), and no error or log line carries a
// token or a token_sha256 value (nor any value that might be a token pasted in the wrong
// place: one over 24 characters or holding a space is described, not shown). Refused at load, each error naming the file, the line and
// the field: YAML that does not parse, an unknown or repeated field, an unknown role or
// kind, a malformed hash, two identities with one name, one token or one certificate name,
// and a file that names no identity at all; in teams: a repeated team, a cohort that is not a
// name, a device kind that is
// not cpu, cuda or cuda-emulated, a quota or a cap that is not a whole number (a quota may be
// 0: that kind is closed to the team; a cap is 1 or more); a borrowing_limit or lending_limit
// without a cohort, of a kind the team's quota does not name, or (lending) above its quota.
//
// Authorisation (who may do what) is not here: the RPC edge (common/rpc_edge.h) resolves
// each call to a Principal (common/security.h, Authenticate) and hands it to the handler,
// which asks common/authz.h's rule table.
#pragma once

#include <array>
#include <map>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace gantry {

enum class PrincipalKind { kUser, kWorker, kShardServer };
// A user's role; services have none.
enum class Role { kNone, kViewer, kUser, kAdmin };

absl::string_view KindName(PrincipalKind kind);  // "user", "worker", "shardserver"
absl::string_view RoleName(Role role);           // "", "viewer", "user", "admin"

// Who a call is from.
struct Principal {
  std::string name;
  std::string team;  // users; may be empty for admins and viewers, always for services
  PrincipalKind kind = PrincipalKind::kUser;
  Role role = Role::kNone;
  // How the call proved it: "token", "certificate", "cluster token" (the single cluster
  // token, GANTRY_TOKEN: one admin), "none" (nothing configured: a laptop cluster).
  std::string via;

  bool is_admin() const { return kind == PrincipalKind::kUser && role == Role::kAdmin; }
  // "user alice (team vision, role user)", "worker gpu-pool-a": for messages and logs.
  std::string Describe() const;
};

// The principal of a cluster with nothing configured (no token, no principals file): an
// admin, so that a laptop cluster has no checks.
Principal LaptopPrincipal();
// The principal of the single cluster token (GANTRY_TOKEN / GANTRY_TOKEN_FILE): one admin.
Principal ClusterTokenPrincipal();

// A team's quota (the principals file's teams: section). Kinds the quota does not name are
// not limited for the team, and a team the section does not name is not limited at all.
// nominal is what the team owns; a team in a cohort may use more of a kind, borrowing what
// the cohort's other teams leave idle of theirs (coordinator/quota.h).
struct TeamQuota {
  std::string team;
  std::map<std::string, int64_t> nominal;  // device kind (resources.device) -> slots (GPUs; cpu workers)
  int64_t max_running_jobs = 0;            // 0: no cap
  std::string cohort;                      // "": none (it neither borrows nor lends)
  // Per kind of nominal, in a cohort (Kueue's borrowingLimit and lendingLimit; absent: none):
  // the most slots it may use beyond its nominal quota, and the most of its nominal quota the
  // cohort's other teams may borrow (the rest is kept for it alone).
  std::map<std::string, int64_t> borrowing_limit;
  std::map<std::string, int64_t> lending_limit;
  int line = 0;                            // where the file names it
};
using TeamQuotas = std::map<std::string, TeamQuota>;  // by team

using Sha256Digest = std::array<uint8_t, 32>;
Sha256Digest Sha256(absl::string_view data);  // OpenSSL EVP
std::string Sha256Hex(absl::string_view data);  // 64 lowercase hex digits
// Two digests equal, in time that does not depend on where they differ (CRYPTO_memcmp).
bool SameDigest(const Sha256Digest& a, const Sha256Digest& b);

// One principals file, parsed and checked; immutable.
class PrincipalSet {
 public:
  // Parses the text of a principals file; `source` names it in errors ("principals.yaml").
  // Errors are INVALID_ARGUMENT "SOURCE:LINE: FIELD: why" (LINE from 1).
  static absl::StatusOr<PrincipalSet> Parse(absl::string_view text, absl::string_view source);

  // The identity whose token_sha256 is SHA-256(token), or null. Every identity with a
  // token is compared, whichever matches (*compared, when given, receives how many).
  const Principal* FindByToken(absl::string_view token, int* compared = nullptr) const;
  const Principal* FindByDigest(const Sha256Digest& digest, int* compared = nullptr) const;
  // The identity whose `certificate` is name, or null.
  const Principal* FindByCertificateName(absl::string_view name) const;

  // In file order, users first. via is "token" or "certificate" as each was found.
  std::vector<Principal> principals() const;
  size_t size() const { return entries_.size(); }
  size_t with_certificate() const;
  // The teams: section (empty: no quotas).
  const TeamQuotas& teams() const { return teams_; }

 private:
  struct Entry {
    Principal principal;  // via empty
    bool has_token = false;
    Sha256Digest digest{};
    std::string certificate;  // empty: none
  };
  std::vector<Entry> entries_;
  TeamQuotas teams_;
  // Found principals are returned with their via set: a copy per way in.
  std::vector<Principal> by_token_, by_certificate_;
};

// The principals file at a path, as in force now: loaded once, reloaded on request (the
// daemons' SIGHUP). A reload that fails leaves the previous set in force. Thread-safe.
class PrincipalsFile {
 public:
  static absl::StatusOr<std::unique_ptr<PrincipalsFile>> Load(std::string path);

  // Reads the file again. On success the new set is in force for every call from now on
  // (a revoked token is refused); on error the previous one stays, and the error is logged
  // and returned. Calls in progress keep the set they started with.
  absl::Status Reload();

  std::shared_ptr<const PrincipalSet> current() const;
  const std::string& path() const { return path_; }

 private:
  explicit PrincipalsFile(std::string path) : path_(std::move(path)) {}
  static absl::StatusOr<PrincipalSet> Read(const std::string& path);

  const std::string path_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const PrincipalSet> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gantry
