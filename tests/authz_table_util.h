// What the authorisation tables share (tests/coordinator/authz_rpc_test.cc,
// tests/shardserver/authz_rpc_test.cc): a principals file with one of each kind of caller
// that the rules tell apart and their tokens; a table's rows (a method, the callers it allows,
// the call) and the check of every row against every caller; the check that a table covers
// its service's descriptor, method for method.
#pragma once

#include <google/protobuf/descriptor.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "common/principals.h"
#include "common/security.h"

namespace gantry::testing {

// Who calls, as the rule table tells callers apart. The job and checkpoint the tables act on
// are kOwner's (alice, team vision).
enum class Caller { kAdmin, kOwner, kTeammate, kOtherTeam, kViewer, kWorker, kShardServer };

struct Identity {
  Caller caller;
  const char* label;  // in failure messages
  const char* name;   // the principals file's name
  const char* token;
};

inline const std::vector<Identity>& Identities() {
  static const std::vector<Identity> ids = {
      {Caller::kAdmin, "admin", "root", "tok-admin-7c1e52a90b3f4d68"},
      {Caller::kOwner, "user (the job's owner)", "alice", "tok-alice-2b9f0e7d31c64a85"},
      {Caller::kTeammate, "user (the owner's team)", "dave", "tok-dave-9e3a6c1f08b2d574"},
      {Caller::kOtherTeam, "user (another team)", "erin", "tok-erin-41d7b8e2c59f0a63"},
      {Caller::kViewer, "viewer", "carol", "tok-carol-e6052f9ab1c74d38"},
      {Caller::kWorker, "worker identity", "gpu-pool-a", "tok-pool-83f1c4e0a7d29b56"},
      {Caller::kShardServer, "shard-server identity", "shards-a", "tok-shards-0c8e7a3d5f41b962"},
  };
  return ids;
}

inline const Identity& IdentityOf(Caller c) {
  for (const auto& id : Identities()) {
    if (id.caller == c) return id;
  }
  return Identities().front();
}

// The principals file naming them all (the viewer is of another team than the job's: viewers
// read every team's).
inline std::string AuthzPrincipalsYaml() {
  auto user = [](const Identity& id, const char* team, const char* role) {
    return absl::StrCat("  - name: ", id.name, "\n", *team ? absl::StrCat("    team: ", team, "\n") : "",
                        "    role: ", role, "\n    token_sha256: ", Sha256Hex(id.token), "\n");
  };
  auto service = [](const Identity& id, const char* kind) {
    return absl::StrCat("  - name: ", id.name, "\n    kind: ", kind, "\n    token_sha256: ", Sha256Hex(id.token), "\n");
  };
  return absl::StrCat("users:\n", user(IdentityOf(Caller::kAdmin), "", "admin"),
                      user(IdentityOf(Caller::kOwner), "vision", "user"),
                      user(IdentityOf(Caller::kTeammate), "vision", "user"),
                      user(IdentityOf(Caller::kOtherTeam), "nlp", "user"),
                      user(IdentityOf(Caller::kViewer), "nlp", "viewer"), "services:\n",
                      service(IdentityOf(Caller::kWorker), "worker"),
                      service(IdentityOf(Caller::kShardServer), "shardserver"));
}

// Writes AuthzPrincipalsYaml() at path, loads it and makes it the process's principals
// (SetProcessPrincipals; the caller sets null again before the file goes).
inline std::unique_ptr<PrincipalsFile> ServeAuthzPrincipals(const std::string& path) {
  EXPECT_TRUE(WriteFileAtomic(path, AuthzPrincipalsYaml()).ok());
  auto f = PrincipalsFile::Load(path);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return nullptr;
  SetProcessPrincipals(f->get());
  return *std::move(f);
}

// A call as c: "authorization: Bearer TOKEN" set by hand (gRPC's call credentials go only over
// TLS, and the tests' loopback channels are plaintext).
inline std::unique_ptr<grpc::ClientContext> As(Caller c) {
  auto ctx = ContextWithDeadline(30);
  ctx->AddMetadata("authorization", absl::StrCat("Bearer ", IdentityOf(c).token));
  return ctx;
}

// One row: the callers a method allows (every other must be refused) and the call.
struct AuthzRow {
  std::set<Caller> allowed;
  std::function<absl::Status(Caller)> call;
};
using AuthzTable = std::map<std::string, AuthzRow>;  // by method

// Every row for every caller: allowed is neither PERMISSION_DENIED nor UNAUTHENTICATED (it may
// fail for another reason: a parameter-server call for a job with no range, say); refused is
// PERMISSION_DENIED naming the caller. Failures name the method and the caller.
inline void CheckEveryCaller(const AuthzTable& table) {
  for (const auto& [method, row] : table) {
    for (const auto& id : Identities()) {
      const absl::Status s = row.call(id.caller);
      if (row.allowed.count(id.caller)) {
        EXPECT_FALSE(absl::IsPermissionDenied(s)) << method << " by " << id.label << " must be allowed: " << s;
        EXPECT_FALSE(absl::IsUnauthenticated(s)) << method << " by " << id.label << ": " << s;
      } else {
        EXPECT_TRUE(absl::IsPermissionDenied(s)) << method << " by " << id.label << " must be refused; got " << s;
        EXPECT_NE(s.message().find(absl::StrCat(" ", id.name, " ")), std::string::npos) << "names who: " << s;
        EXPECT_NE(s.message().find(" may not "), std::string::npos) << s;
      }
    }
  }
}

// Every method of the service has a row, and every row is a method of it.
inline void CheckCoversService(const AuthzTable& table, const std::string& service_name) {
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service_name);
  ASSERT_NE(service, nullptr) << service_name;
  std::set<std::string> methods;
  for (int i = 0; i < service->method_count(); ++i) methods.insert(service->method(i)->name());
  for (const auto& m : methods) EXPECT_TRUE(table.count(m)) << service_name << "." << m << " has no row: say who may call it";
  for (const auto& [m, row] : table) EXPECT_TRUE(methods.count(m)) << m << " is not a method of " << service_name;
}

}  // namespace gantry::testing
