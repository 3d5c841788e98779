#include "common/security.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/generic/generic_stub.h>
#include <openssl/crypto.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <vector>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"

namespace gantry {

namespace {

absl::StatusOr<std::string> FileOf(const char* var) {
  const char* path = std::getenv(var);
  if (path == nullptr || *path == '\0') return std::string();
  auto text = ReadFileToString(path);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(var, "=", path, ": ", text.status().message()));
  if (text->empty()) return absl::InvalidArgumentError(absl::StrCat(var, "=", path, ": the file is empty"));
  return *text;
}

// The token a call carries, from "authorization: Bearer TOKEN".
std::string CallToken(const grpc::ServerContextBase& ctx) {
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return "";
  const std::string v(it->second.data(), it->second.size());
  return v.rfind("Bearer ", 0) == 0 ? v.substr(7) : "";
}

bool SameSecret(const std::string& a, const std::string& b) {  // constant time in the content
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::atomic<const PrincipalsFile*> process_principals{nullptr};

// The principal a verified client certificate names (its CN or a SAN is an identity's
// `certificate`), null when none does; an error when it names two.
absl::StatusOr<const Principal*> CertificatePrincipal(const grpc::ServerContextBase& ctx, const PrincipalSet& set) {
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return nullptr;
  const Principal* found = nullptr;
  for (const char* property : {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME,
                               GRPC_PEER_URI_PROPERTY_NAME, GRPC_PEER_EMAIL_PROPERTY_NAME}) {
    for (const grpc::string_ref& v : auth->FindPropertyValues(property)) {
      const Principal* p = set.FindByCertificateName(absl::string_view(v.data(), v.size()));
      if (p == nullptr || p == found) continue;
      if (found != nullptr) {
        return absl::UnauthenticatedError(absl::StrCat("the client certificate names two identities, ", found->name,
                                                       " and ", p->name, ": it must name one"));
      }
      found = p;
    }
  }
  return found;
}

}  // namespace

absl::StatusOr<SecurityConfig> LoadSecurity() {
  SecurityConfig c;
  for (auto [var, field] : {std::pair{"GANTRY_TLS_CA", &c.ca_pem}, std::pair{"GANTRY_TLS_CERT", &c.cert_pem},
                            std::pair{"GANTRY_TLS_KEY", &c.key_pem}, std::pair{"GANTRY_TLS_CLIENT_CA", &c.client_ca_pem}}) {
    auto pem = FileOf(var);
    if (!pem.ok()) return pem.status();
    *field = *pem;
  }
  if (c.cert_pem.empty() != c.key_pem.empty()) {
    return absl::InvalidArgumentError("GANTRY_TLS_CERT and GANTRY_TLS_KEY go together: set both or neither");
  }
  if (const char* t = std::getenv("GANTRY_TOKEN"); t != nullptr && *t != '\0') {
    c.token = t;
  } else {
    auto f = FileOf("GANTRY_TOKEN_FILE");
    if (!f.ok()) return f.status();
    c.token = std::string(absl::StripAsciiWhitespace(*f));
  }
  if (!c.token.empty() && !c.client_tls() && !c.server_tls()) {
    return absl::InvalidArgumentError(
        "a cluster token (GANTRY_TOKEN or GANTRY_TOKEN_FILE) travels only over TLS: set GANTRY_TLS_CA (clients) or "
        "GANTRY_TLS_CERT and GANTRY_TLS_KEY (servers) too");
  }
  return c;
}

const SecurityConfig& ProcessSecurity() {
  static const SecurityConfig config = [] {
    auto c = LoadSecurity();
    if (!c.ok()) {
      std::fprintf(stderr, "gantry: %s\n", std::string(c.status().message()).c_str());
      std::exit(2);
    }
    return *c;
  }();
  return config;
}

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials() {
  const SecurityConfig& s = ProcessSecurity();
  if (!s.client_tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = s.ca_pem;
  o.pem_cert_chain = s.cert_pem;  // mutual TLS when set
  o.pem_private_key = s.key_pem;
  auto creds = grpc::SslCredentials(o);
  if (s.token.empty()) return creds;
  return grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(s.token));
}

std::shared_ptr<grpc::ServerCredentials> ServerCredentials() {
  const SecurityConfig& s = ProcessSecurity();
  if (!s.server_tls()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(s.client_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                                                              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = s.client_ca_pem;
  o.pem_key_cert_pairs.push_back({s.key_pem, s.cert_pem});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address, int max_receive_bytes,
                                           int max_reconnect_backoff_ms) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_receive_bytes);
  if (max_reconnect_backoff_ms > 0) args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_reconnect_backoff_ms);
  return grpc::CreateCustomChannel(address, ClientCredentials(), args);
}

absl::StatusOr<bool> CheckServing(const std::string& address) {
  grpc::GenericStub stub(MakeChannel(address));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::Slice empty("");
  const grpc::ByteBuffer req(&empty, 1);  // HealthCheckRequest{service = ""}: the server as a whole
  grpc::ByteBuffer resp;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &req, &resp,
                 [&](grpc::Status st) { done.set_value(st); });
  const grpc::Status st = done.get_future().get();
  if (!st.ok()) {
    return absl::UnavailableError(absl::StrCat("health check of ", address, ": ", st.error_message()));
  }
  std::vector<grpc::Slice> slices;
  (void)resp.Dump(&slices);
  std::string r;
  for (auto& sl : slices) r.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  return r.size() == 2 && r[0] == 0x08 && r[1] == 0x01;  // HealthCheckResponse{status = SERVING}
}

void SetProcessPrincipals(const PrincipalsFile* principals) { process_principals.store(principals); }

const PrincipalsFile* ProcessPrincipals() { return process_principals.load(); }

absl::StatusOr<Principal> Authenticate(const grpc::ServerContextBase& ctx) {
  const PrincipalsFile* file = ProcessPrincipals();
  const std::string& cluster_token = ProcessSecurity().token;
  if (file == nullptr && cluster_token.empty()) return LaptopPrincipal();
  const std::string got = CallToken(ctx);
  if (!got.empty()) {
    if (!cluster_token.empty() && SameSecret(got, cluster_token)) return ClusterTokenPrincipal();
    if (file == nullptr) return absl::UnauthenticatedError("wrong cluster token");
    const std::shared_ptr<const PrincipalSet> set = file->current();
    if (const Principal* p = set->FindByToken(got)) return *p;
    return absl::UnauthenticatedError(
        "unknown token: no identity of this cluster has it (revoked, mistyped, or another cluster's)");
  }
  if (file == nullptr) return absl::UnauthenticatedError("this cluster needs its token (GANTRY_TOKEN or GANTRY_TOKEN_FILE)");
  const std::shared_ptr<const PrincipalSet> set = file->current();
  auto by_certificate = CertificatePrincipal(ctx, *set);
  if (!by_certificate.ok()) return by_certificate.status();
  if (*by_certificate != nullptr) return **by_certificate;
  return absl::UnauthenticatedError(
      "this call names no identity: it carries no token (GANTRY_TOKEN or GANTRY_TOKEN_FILE) and no client "
      "certificate that the principals file names");
}

absl::Status CheckToken(const grpc::ServerContextBase& ctx) { return Authenticate(ctx).status(); }

}  // namespace gantry
