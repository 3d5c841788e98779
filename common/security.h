// TLS and the cluster token, for every gRPC endpoint and client. Configured from the
// environment (the systemd EnvironmentFile, a Kubernetes Secret, a shell):
//   GANTRY_TLS_CA      the CA that signed the servers' certificates (clients: TLS on)
//   GANTRY_TLS_CERT    this process's certificate and key (servers: TLS on; clients: for
//   GANTRY_TLS_KEY     mutual TLS)
//   GANTRY_TLS_CLIENT_CA  servers: require client certificates signed by this CA (mTLS)
//   GANTRY_TOKEN or GANTRY_TOKEN_FILE  the cluster token: clients send it
//                      ("authorization: Bearer ..."), servers refuse a call without it
//                      (UNAUTHENTICATED) except the health service
// A token travels only over TLS, so a token without TLS is a configuration error. Nothing
// set: plaintext and no token, as on a laptop.
//
// A server may also have a principals file (common/principals.h; the daemons' --principals
// or GANTRY_PRINCIPALS_FILE): users with a team and a role and service identities, each
// with its own token or client certificate. Authenticate resolves a call to its Principal:
//   - nothing configured (no cluster token, no principals file): LaptopPrincipal(), an
//     admin; a laptop cluster has no checks;
//   - a token ("authorization: Bearer ..."): the cluster token is ClusterTokenPrincipal(),
//     one admin; else the principals file's identity with that token; else UNAUTHENTICATED;
//   - no token: the principals file's identity that the verified client certificate (mutual
//     TLS, GANTRY_TLS_CLIENT_CA) names by its CN or a SAN; else UNAUTHENTICATED.
// No refusal names a token or a hash.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/principals.h"

namespace gantry {

struct SecurityConfig {
  std::string ca_pem, cert_pem, key_pem, client_ca_pem;
  std::string token;
  bool client_tls() const { return !ca_pem.empty(); }
  bool server_tls() const { return !cert_pem.empty(); }
};

// Reads the environment and the files it names; errors name the variable and the file.
absl::StatusOr<SecurityConfig> LoadSecurity();
// The process's configuration: LoadSecurity() once (a bad one is fatal, said on stderr).
const SecurityConfig& ProcessSecurity();

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials();
std::shared_ptr<grpc::ServerCredentials> ServerCredentials();
// A channel to address with the process's credentials and the token on every call. A
// positive max_reconnect_backoff_ms caps the wait between reconnection attempts (gRPC's
// default grows to 120 s): a long-lived channel to a daemon that restarts is usable again
// within that time of its return.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, int max_receive_bytes = 16 << 20,
                                           int max_reconnect_backoff_ms = 0);

// grpc.health.v1.Health/Check on address (TLS from the environment; the health service needs
// no token): true when the server answers SERVING.
absl::StatusOr<bool> CheckServing(const std::string& address);

// The principals file this process's servers authenticate against (null: none, the
// default). The file must outlive every call; set it before serving, or to null after.
void SetProcessPrincipals(const PrincipalsFile* principals);
const PrincipalsFile* ProcessPrincipals();

// Who the call is from (above); UNAUTHENTICATED naming what is missing or wrong, never a
// secret. The RPC edge (common/rpc_edge.h) calls it for every Gantry method.
absl::StatusOr<Principal> Authenticate(const grpc::ServerContextBase& ctx);
// Authenticate's status: OK when nothing is configured or the call names an identity.
absl::Status CheckToken(const grpc::ServerContextBase& ctx);

}  // namespace gantry
