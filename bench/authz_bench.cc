// What authorisation costs a call (common/authz.h), against its peer measured in the same run:
// authentication, which every call of a cluster with a principals file already pays (the
// token's SHA-256 and a constant-time comparison with every identity's hash,
// PrincipalSet::FindByToken). The principals: 100 users in 10 teams (one admin, nine viewers,
// 90 users) and 10 worker and shard-server identities, as issue 50's load figures ask.
// Rows: a user reading a teammate's job (allowed), a user cancelling another's job (refused,
// the message built), the listing filter (MayReadJob) over a page of 1000 jobs of 10 teams.
//   authz_bench [--calls N]   (default 1,000,000)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/authz.h"
#include "common/principals.h"

namespace {

using Clock = std::chrono::steady_clock;

// Nanoseconds per call of fn over n calls.
template <typename F>
double NsPerCall(long n, F&& fn) {
  const auto t0 = Clock::now();
  for (long i = 0; i < n; ++i) fn(i);
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / static_cast<double>(n);
}

volatile long sink = 0;  // results are used, so the loops are not optimised away

}  // namespace

int main(int argc, char** argv) {
  long calls = 1000000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--calls") == 0 && i + 1 < argc) {
      calls = std::atol(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: authz_bench [--calls N]\n");
      return 2;
    }
  }
  if (calls < 1) {
    std::fprintf(stderr, "authz_bench: --calls must be positive\n");
    return 2;
  }
  std::string yaml = "users:\n";
  std::vector<std::string> tokens;
  for (int u = 0; u < 100; ++u) {
    const std::string token = absl::StrCat("token-of-user-", u, "-5f0c9e2a71b84d36");
    const char* role = u == 0 ? "admin" : u % 10 == 1 ? "viewer" : "user";
    absl::StrAppend(&yaml, "  - name: user", u, "\n    team: team", u % 10, "\n    role: ", role,
                    "\n    token_sha256: ", gantry::Sha256Hex(token), "\n");
    tokens.push_back(token);
  }
  yaml += "services:\n";
  for (int s = 0; s < 10; ++s) {
    absl::StrAppend(&yaml, "  - name: service", s, "\n    kind: ", s < 5 ? "worker" : "shardserver",
                    "\n    token_sha256: ", gantry::Sha256Hex(absl::StrCat("service-token-", s, "-a8e1")), "\n");
  }
  auto set = gantry::PrincipalSet::Parse(yaml, "bench");
  if (!set.ok()) {
    std::fprintf(stderr, "authz_bench: %s\n", std::string(set.status().message()).c_str());
    return 1;
  }
  const gantry::Principal* user = set->FindByToken(tokens[12]);  // user12: team2, role user
  if (user == nullptr || user->role != gantry::Role::kUser) {
    std::fprintf(stderr, "authz_bench: user12 is not a user\n");
    return 1;
  }
  const gantry::AuthzObject teammates = gantry::AuthzObject::Job("j-000042", "user22", "team2");
  const gantry::AuthzObject others = gantry::AuthzObject::Job("j-000043", "user13", "team3");
  std::vector<std::pair<std::string, std::string>> page;  // (owner, team) of 1000 jobs
  for (int j = 0; j < 1000; ++j) page.emplace_back(absl::StrCat("user", j % 100), absl::StrCat("team", j % 10));

  const long auth_calls = std::max(1L, calls / 20);  // SHA-256 and 110 comparisons: slower
  const double authenticate =
      NsPerCall(auth_calls, [&](long i) {
        sink = sink + (set->FindByToken(tokens[i % tokens.size()]) != nullptr);
      });
  const double allowed = NsPerCall(calls, [&](long) {
    sink = sink + gantry::Authorize(*user, gantry::Action::kReadJob, teammates).ok();
  });
  const double refused = NsPerCall(calls / 10, [&](long) {
    sink = sink + gantry::Authorize(*user, gantry::Action::kCancelJob, others).ok();
  });
  const double filter = NsPerCall(std::max(1L, calls / 1000), [&](long) {
    long n = 0;
    for (const auto& [owner, team] : page) n += gantry::MayReadJob(*user, owner, team);
    sink = sink + n;
  });
  std::printf("%-58s %12s\n", "per call (100 users in 10 teams, 10 services)", "ns");
  std::printf("%-58s %12.1f\n", "peer: authenticate a token (FindByToken)", authenticate);
  std::printf("%-58s %12.1f\n", "authorize, allowed (a teammate's job)", allowed);
  std::printf("%-58s %12.1f\n", "authorize, refused (another's job; the message built)", refused);
  std::printf("%-58s %12.1f\n", "listing filter: MayReadJob over a page of 1000 jobs", filter);
  return 0;
}
