// whoami (the caller as the coordinator knows it), quota (the teams' quotas, use and queued
// jobs), principals hash (a token's SHA-256 for the principals file, common/principals.h) and
// health (a daemon's gRPC health, no token).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "common/principals.h"
#include "common/security.h"

namespace gantry::cli {

// whoami
int WhoAmICommand(const Options& o) {
  CommandFlags f = CommandFlagsFor(o);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  v1::WhoAmIResponse resp;
  const grpc::Status s = Connect(o)->WhoAmI(Ctx(o).get(), v1::WhoAmIRequest(), &resp);
  if (!s.ok()) return Fail(s);
  if (o.output == "json") {
    std::printf("%s\n", Json(resp).c_str());
    return 0;
  }
  auto dash = [](const std::string& v) { return v.empty() ? std::string("-") : v; };
  std::printf("name:  %s\nkind:  %s\nteam:  %s\nrole:  %s\nby:    %s\n", resp.name().c_str(), resp.kind().c_str(),
              dash(resp.team()).c_str(), dash(resp.role()).c_str(), resp.authenticated_by().c_str());
  return 0;
}

// quota [--team TEAM]: a row per team and device kind it has a quota of or uses.
int QuotaCommand(const Options& o) {
  v1::GetQuotasRequest req;
  std::string team;
  CommandFlags f = CommandFlagsFor(o);
  f.String("team", &team, "TEAM", "only TEAM (default: every team you may read; a user's own)");
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  req.set_team(team);
  v1::GetQuotasResponse resp;
  const grpc::Status s = Connect(o)->GetQuotas(Ctx(o).get(), req, &resp);
  if (!s.ok()) return Fail(s);
  if (o.output == "json") {
    std::printf("%s\n", Json(resp).c_str());
    return 0;
  }
  if (!resp.quotas_in_force()) std::printf("no quotas in force (the principals file has no teams: section)\n");
  auto count = [](int64_t n) { return n < 0 ? std::string("-") : absl::StrCat(n); };
  std::printf("%-16s %-14s %6s %6s %8s %-12s %8s %12s %10s %6s %8s %4s %7s %5s\n", "TEAM", "DEVICE", "USED", "QUOTA",
              "BORROWED", "COHORT", "LENDABLE", "BORROW-LIMIT", "LEND-LIMIT", "SHARE", "RUNNING", "CAP", "QUEUED", "HELD");
  for (const auto& t : resp.teams()) {
    const std::string cap = t.max_running_jobs() > 0 ? absl::StrCat(t.max_running_jobs()) : "-";
    const std::string share = absl::StrFormat("%.2f", t.dominant_share());
    const std::string cohort = t.cohort().empty() ? "-" : t.cohort();
    auto row = [&](const std::string& device, const std::string& used, const std::string& nominal,
                   const std::string& borrowed, const std::string& lendable, const std::string& borrow_limit,
                   const std::string& lend_limit) {
      std::printf("%-16s %-14s %6s %6s %8s %-12s %8s %12s %10s %6s %8lld %4s %7lld %5lld\n",
                  t.team().empty() ? "(none)" : t.team().c_str(), device.c_str(), used.c_str(), nominal.c_str(),
                  borrowed.c_str(), cohort.c_str(), lendable.c_str(), borrow_limit.c_str(), lend_limit.c_str(),
                  share.c_str(),
                  static_cast<long long>(t.running_jobs()), cap.c_str(), static_cast<long long>(t.queued_jobs()),
                  static_cast<long long>(t.held_jobs()));
    };
    if (t.devices().empty()) row("-", "0", "-", "0", "-", "-", "-");
    for (const auto& d : t.devices()) {
      // LENDABLE: what its cohort would lend it now beyond its own quota; the limits: "-" none.
      const bool lends = !t.cohort().empty() && d.nominal() >= 0;
      row(d.device(), count(d.used()), count(d.nominal()), absl::StrCat(d.borrowed()),
          lends ? absl::StrCat(d.borrowable()) : "-", d.has_borrowing_limit() ? absl::StrCat(d.borrowing_limit()) : "-",
          d.has_lending_limit() ? absl::StrCat(d.lending_limit()) : "-");
    }
  }
  return 0;
}

// principals hash: the token on stdin (one line; surrounding white space dropped), its hash on
// stdout. From stdin, so that the token stays out of the shell's history and `ps`.
int PrincipalsCommand(const Options& o) {
  std::vector<std::string> what;
  CommandFlags f = CommandFlagsFor(o);
  f.Operands(&what, 1, 1);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  if (what[0] != "hash") {
    std::fprintf(stderr, "usage: gantry principals hash < TOKEN_FILE   (prints the token's token_sha256)\n");
    return 2;
  }
  const std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const std::string token(absl::StripAsciiWhitespace(in));
  if (token.empty()) {
    std::fprintf(stderr, "gantry: principals hash: no token on stdin\n");
    return 2;
  }
  if (token.find_first_of("\r\n") != std::string::npos) {
    std::fprintf(stderr, "gantry: principals hash: stdin holds more than one line: give one token\n");
    return 2;
  }
  std::printf("%s\n", Sha256Hex(token).c_str());
  return 0;
}

// health [ADDR]: for probes (deploy/k8s), so no token is needed.
int HealthCommand(const Options& o) {
  std::vector<std::string> address;
  CommandFlags f = CommandFlagsFor(o);
  f.Operands(&address, 0, 1);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  auto serving = CheckServing(address.empty() ? o.coordinator : address[0]);
  if (!serving.ok()) {
    std::fprintf(stderr, "gantry: %s\n", std::string(serving.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", *serving ? "SERVING" : "NOT_SERVING");
  return *serving ? 0 : 1;
}

}  // namespace gantry::cli
