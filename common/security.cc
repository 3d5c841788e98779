#include "common/security.h"

#include <grpcpp/generic/generic_stub.h>

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
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
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

absl::Status CheckToken(const grpc::ServerContextBase& ctx) {
  const std::string& want = ProcessSecurity().token;
  if (want.empty()) return absl::OkStatus();
  const std::string got = CallToken(ctx);
  if (got.empty()) return absl::UnauthenticatedError("this cluster needs its token (GANTRY_TOKEN or GANTRY_TOKEN_FILE)");
  if (!SameSecret(got, want)) return absl::UnauthenticatedError("wrong cluster token");
  return absl::OkStatus();
}

}  // namespace gantry
