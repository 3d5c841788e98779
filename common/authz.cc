#include "common/authz.h"

#include "absl/strings/str_cat.h"

namespace gantry {

namespace {

// A job is the caller's own when it records the caller as its owner.
bool Owns(const Principal& who, absl::string_view owner) { return !owner.empty() && owner == who.name; }
// ... and the caller's team's when both name the same team.
bool SameTeam(const Principal& who, absl::string_view team) { return !team.empty() && team == who.team; }

// The rule table: nullptr when allowed, else why not (the rule that refuses).
const char* Refusal(const Principal& who, Action action, absl::string_view owner, absl::string_view team) {
  switch (who.kind) {
    case PrincipalKind::kWorker:
      switch (action) {
        case Action::kAttach:
        case Action::kRendezvous:
        case Action::kWriteCheckpoint:
        case Action::kListCheckpoints:
        case Action::kReadCheckpoint:
        case Action::kParamServer:
        case Action::kWhoAmI:
          return nullptr;
        default:
          return "a worker identity attaches, uses the rendezvous store, reads and writes checkpoints and the "
                 "parameter server, nothing else";
      }
    case PrincipalKind::kShardServer:
      if (action == Action::kRegisterShardServer || action == Action::kWhoAmI) return nullptr;
      return "a shard-server identity registers with the coordinator, nothing else";
    case PrincipalKind::kUser:
      break;
  }
  switch (who.role) {
    case Role::kAdmin:
      return nullptr;
    case Role::kNone:
      return "an identity with no role may do nothing";
    case Role::kViewer:
      switch (action) {
        case Action::kReadJob:
        case Action::kListJobs:
        case Action::kListWorkers:
        case Action::kListShardServers:
        case Action::kWhoAmI:
        case Action::kListCheckpoints:
        case Action::kReadCheckpoint:
        case Action::kReadQuota:
          return nullptr;
        default:
          return "viewers only read";
      }
    case Role::kUser:
      break;
  }
  // role user
  switch (action) {
    case Action::kSubmitJob:
    case Action::kListJobs:
    case Action::kListWorkers:
    case Action::kListShardServers:
    case Action::kWhoAmI:
    case Action::kListCheckpoints:
      return nullptr;
    case Action::kReadJob:
    case Action::kReadCheckpoint:
      if (Owns(who, owner) || SameTeam(who, team)) return nullptr;
      return "users read only their own jobs and their team's";
    case Action::kReadQuota:
      if (SameTeam(who, team)) return nullptr;
      return "users read only their own team's quota";
    case Action::kCancelJob:
      if (Owns(who, owner)) return nullptr;
      return "users cancel only their own jobs";
    case Action::kDeleteCheckpoint:
      if (Owns(who, owner)) return nullptr;
      return "users delete only their own jobs' checkpoints";
    case Action::kAttach:
    case Action::kRendezvous:
      return "only worker identities attach and use the rendezvous store";
    case Action::kRegisterShardServer:
      return "only shard-server identities register";
    case Action::kWriteCheckpoint:
    case Action::kCommitCheckpoint:
      return "checkpoints are written by workers and committed by the coordinator";
    case Action::kParamServer:
      return "only worker identities use the parameter server";
  }
  return "an unknown action";
}

}  // namespace

absl::string_view ActionName(Action action) {
  switch (action) {
    case Action::kSubmitJob: return "submit";
    case Action::kReadJob: return "read";
    case Action::kListJobs: return "list the jobs of";
    case Action::kCancelJob: return "cancel";
    case Action::kListWorkers: return "list the workers of";
    case Action::kListShardServers: return "list the shard servers of";
    case Action::kWhoAmI: return "ask who they are on";
    case Action::kReadQuota: return "read the quota of";
    case Action::kAttach: return "attach as a worker to";
    case Action::kRendezvous: return "use the rendezvous store of";
    case Action::kRegisterShardServer: return "register as a shard server with";
    case Action::kWriteCheckpoint: return "write checkpoints of";
    case Action::kCommitCheckpoint: return "commit checkpoints of";
    case Action::kListCheckpoints: return "list the checkpoints of";
    case Action::kReadCheckpoint: return "read the checkpoints of";
    case Action::kDeleteCheckpoint: return "delete the checkpoints of";
    case Action::kParamServer: return "use the parameter server for";
  }
  return "?";
}

std::string AuthzObject::Describe() const {
  if (job_id.empty()) return team.empty() ? "the cluster" : absl::StrCat("team ", team);
  if (owner.empty() && team.empty()) return absl::StrCat("job ", job_id);
  return absl::StrCat("job ", job_id, " (", owner.empty() ? "no owner" : absl::StrCat("owner ", owner),
                      team.empty() ? "" : absl::StrCat(", team ", team), ")");
}

absl::Status Authorize(const Principal& who, Action action, const AuthzObject& object) {
  const char* why = Refusal(who, action, object.owner, object.team);
  if (why == nullptr) return absl::OkStatus();
  // A submission's object is the cluster ("may not submit jobs to the cluster").
  const std::string what = action == Action::kSubmitJob ? "submit jobs to" : std::string(ActionName(action));
  return absl::PermissionDeniedError(absl::StrCat(who.Describe(), " may not ", what, " ", object.Describe(), ": ", why));
}

bool MayReadJob(const Principal& who, absl::string_view owner, absl::string_view team) {
  return Refusal(who, Action::kReadJob, owner, team) == nullptr;
}

}  // namespace gantry
