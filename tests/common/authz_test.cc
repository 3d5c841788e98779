// The rule table (common/authz.h) on its own: the identities that are not in a principals file
// (the single cluster token, a laptop cluster's anonymous) are admins and may do everything, as
// before authorisation existed; an identity with no role may do nothing; a job that records no
// owner is nobody's; refusals read as who, action, object, rule.
#include "common/authz.h"

#include <gtest/gtest.h>

#include <vector>

namespace gantry {
namespace {

const std::vector<Action> kEveryAction = {
    Action::kSubmitJob,       Action::kReadJob,         Action::kListJobs,         Action::kCancelJob,
    Action::kListWorkers,     Action::kListShardServers, Action::kWhoAmI,          Action::kAttach,
    Action::kRendezvous,      Action::kRegisterShardServer, Action::kWriteCheckpoint, Action::kCommitCheckpoint,
    Action::kListCheckpoints, Action::kReadCheckpoint,  Action::kDeleteCheckpoint, Action::kParamServer,
    Action::kReadQuota};

Principal User(const char* name, const char* team, Role role) {
  Principal p;
  p.name = name;
  p.team = team;
  p.role = role;
  p.via = "token";
  return p;
}

TEST(AuthzTest, TheClusterTokenAndALaptopClusterMayDoEverything) {
  const AuthzObject job = AuthzObject::Job("j-000001", "alice", "vision");
  for (const Principal& p : {ClusterTokenPrincipal(), LaptopPrincipal()}) {
    for (Action a : kEveryAction) {
      EXPECT_TRUE(Authorize(p, a, job).ok()) << p.Describe() << " " << ActionName(a);
      EXPECT_TRUE(Authorize(p, a, AuthzObject::Job("j-000002", "", "")).ok()) << p.Describe() << " " << ActionName(a);
    }
  }
}

TEST(AuthzTest, AnIdentityWithNoRoleMayDoNothing) {
  const Principal nobody = User("nobody", "vision", Role::kNone);
  for (Action a : kEveryAction) {
    EXPECT_TRUE(absl::IsPermissionDenied(Authorize(nobody, a, AuthzObject::Job("j-000001", "nobody", "vision"))))
        << ActionName(a);
  }
}

TEST(AuthzTest, AJobWithNoOwnerIsNobodysAndATeamMustBeNamedToMatch) {
  const AuthzObject ownerless = AuthzObject::Job("j-000001", "", "");
  const Principal teamless = User("zed", "", Role::kUser);  // a user with no team shares none
  for (const Principal& p : {User("alice", "vision", Role::kUser), teamless}) {
    EXPECT_TRUE(absl::IsPermissionDenied(Authorize(p, Action::kReadJob, ownerless))) << p.Describe();
    EXPECT_TRUE(absl::IsPermissionDenied(Authorize(p, Action::kCancelJob, ownerless))) << p.Describe();
    EXPECT_TRUE(absl::IsPermissionDenied(Authorize(p, Action::kDeleteCheckpoint, ownerless))) << p.Describe();
  }
  EXPECT_TRUE(Authorize(User("carol", "", Role::kViewer), Action::kReadJob, ownerless).ok());
  EXPECT_FALSE(MayReadJob(teamless, "amy", ""));
  EXPECT_TRUE(MayReadJob(teamless, "zed", ""));
  EXPECT_EQ(Authorize(User("alice", "vision", Role::kUser), Action::kReadJob, ownerless).message(),
            "user alice (team vision, role user) may not read job j-000001: users read only their own jobs and their "
            "team's");
}

TEST(AuthzTest, ServiceIdentitiesDoOnlyTheirPart) {
  Principal worker;
  worker.name = "gpu-pool-a";
  worker.kind = PrincipalKind::kWorker;
  Principal shards;
  shards.name = "shards-a";
  shards.kind = PrincipalKind::kShardServer;
  const AuthzObject job = AuthzObject::Job("j-000001", "alice", "vision");
  EXPECT_TRUE(Authorize(worker, Action::kAttach, AuthzObject::Cluster()).ok());
  EXPECT_TRUE(Authorize(worker, Action::kReadCheckpoint, job).ok());
  EXPECT_EQ(Authorize(worker, Action::kRegisterShardServer, AuthzObject::Cluster()).message(),
            "worker gpu-pool-a may not register as a shard server with the cluster: a worker identity attaches, uses "
            "the rendezvous store, reads and writes checkpoints and the parameter server, nothing else");
  EXPECT_TRUE(Authorize(shards, Action::kRegisterShardServer, AuthzObject::Cluster()).ok());
  EXPECT_EQ(Authorize(shards, Action::kCancelJob, job).message(),
            "shardserver shards-a may not cancel job j-000001 (owner alice, team vision): a shard-server identity "
            "registers with the coordinator, nothing else");
}

}  // namespace
}  // namespace gantry
