// The load test's users (ControlPlaneOptions::users, issue 50 item 5): a test CA and the
// cluster token (deploy/tls/make-test-ca.sh), a principals file of users in teams with quotas,
// and the environment that makes the daemons (which inherit it) and this process's channels
// (common/security.h) serve and call with TLS and the cluster token. Calls made as a user go on
// a channel that carries no token of its own (UserChannel) with the user's token on the call
// (AsUser).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/load/control_plane.h"

namespace gantry::load {

struct Users {
  std::vector<std::string> names, tokens;  // user k: "load-user-K" of team "load-team-(K % teams)"
};

// Writes DIR/tls (the CA, the servers' certificate, the cluster token) and DIR/principals.yaml
// (o.users users, role user, in o.teams teams; each team a quota of ceil(workers / teams) cpu
// slots, every team in the cohort "load"; no teams: section without o.quotas), and sets GANTRY_TLS_CA, GANTRY_TLS_CERT,
// GANTRY_TLS_KEY, GANTRY_TOKEN_FILE and GANTRY_PRINCIPALS_FILE. With o.users 0 (o.tls), TLS and
// the cluster token alone: no principals file. Call it before this process makes its first
// channel (the security configuration is read once).
absl::StatusOr<Users> SetUpUsers(const ControlPlaneOptions& o, const std::string& dir);

// A channel of its own with TLS and no token (the caller adds one per call).
std::shared_ptr<grpc::Channel> UserChannel(const std::string& address);
// The user's token on this call ("authorization: Bearer ...").
void AsUser(grpc::ClientContext* ctx, const std::string& token);

}  // namespace gantry::load
