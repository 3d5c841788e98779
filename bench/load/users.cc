#include "bench/load/users.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/principals.h"
#include "common/security.h"

namespace gantry::load {

absl::StatusOr<Users> SetUpUsers(const ControlPlaneOptions& o, const std::string& dir) {
  if (o.users < 0 || (o.users > 0 && (o.teams < 1 || o.teams > o.users))) {
    return absl::InvalidArgumentError(absl::StrCat("users (", o.users, ") and teams (", o.teams,
                                                   ") must be positive, with no more teams than users"));
  }
  const std::string tls = (std::filesystem::path(dir) / "tls").string();
  const std::string make_ca = absl::StrCat("bash '", GANTRY_SOURCE_DIR, "/deploy/tls/make-test-ca.sh' '", tls,
                                           "' >'", dir, "/make-test-ca.log' 2>&1");
  if (std::system(make_ca.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("deploy/tls/make-test-ca.sh failed (", dir, "/make-test-ca.log)"));
  }
  Users u;
  std::random_device seed;
  std::mt19937_64 rng(seed());
  std::string file = "users:\n";
  for (int k = 0; k < o.users; ++k) {
    u.names.push_back(absl::StrFormat("load-user-%03d", k));
    u.tokens.push_back(absl::StrFormat("%016x%016x", rng(), rng()));
    absl::StrAppend(&file, "  - name: ", u.names.back(), "\n    team: load-team-", k % o.teams,
                    "\n    role: user\n    token_sha256: ", Sha256Hex(u.tokens.back()), "\n");
  }
  const int quota = (o.workers + o.teams - 1) / o.teams;
  if (o.quotas) absl::StrAppend(&file, "teams:\n");
  for (int t = 0; o.quotas && t < o.teams; ++t) {
    absl::StrAppend(&file, "  - name: load-team-", t, "\n    quota: {cpu: ", quota, "}\n    cohort: load\n");
  }
  const std::string principals = (std::filesystem::path(dir) / "principals.yaml").string();
  {
    std::ofstream out(principals);
    out << file;
    if (!out.good()) return absl::UnavailableError(absl::StrCat("cannot write ", principals));
  }
  // What PrincipalsFile::Load will say of it, before any daemon reads it.
  if (o.users > 0) {
    if (auto set = PrincipalSet::Parse(file, principals); !set.ok()) return set.status();
  }
  ::setenv("GANTRY_TLS_CA", (tls + "/ca.pem").c_str(), 1);
  ::setenv("GANTRY_TLS_CERT", (tls + "/server.pem").c_str(), 1);
  ::setenv("GANTRY_TLS_KEY", (tls + "/server.key").c_str(), 1);
  ::setenv("GANTRY_TOKEN_FILE", (tls + "/token").c_str(), 1);
  if (o.users > 0) ::setenv("GANTRY_PRINCIPALS_FILE", principals.c_str(), 1);
  return u;
}

std::shared_ptr<grpc::Channel> UserChannel(const std::string& address) {
  const SecurityConfig& s = ProcessSecurity();
  grpc::SslCredentialsOptions tls;
  tls.pem_root_certs = s.ca_pem;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // a connection of its own, as OwnChannel
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(tls), args);
}

void AsUser(grpc::ClientContext* ctx, const std::string& token) { ctx->AddMetadata("authorization", "Bearer " + token); }

}  // namespace gantry::load
