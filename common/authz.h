// Who may do what: the one authorisation rule table of a Gantry cluster (issue 50 item 2).
// Every RPC of the coordinator and the shard server, and every request of the parameter
// server's data port, asks Authorize(principal, action, object) before it acts; the caller's
// Principal comes from the RPC edge (common/rpc_edge.h, Authenticate).
//
// The rules (docs/operations.md, "Users, teams and quotas"):
//   - admin (a principals file's admin, the single cluster token, a laptop cluster's
//     anonymous): everything;
//   - viewer: reads: jobs, their events, workers, shard servers, checkpoints, quotas (every
//     team's);
//   - user: submits jobs; reads their own jobs and their team's (and those jobs'
//     checkpoints: list, read, so export, download and sample); cancels their own jobs and
//     deletes their own checkpoints; lists workers and shard servers; reads their own team's
//     quota and use;
//   - worker identity: attaches, uses the rendezvous store, writes, lists and reads
//     checkpoints (a resumed rank reads any job's it is assigned), and the parameter server
//     (gRPC and the data port);
//   - shard-server identity: registers with the coordinator;
//   - everyone authenticated: WhoAmI.
// Anything else is refused: PERMISSION_DENIED naming who, the action and the object, and the
// rule that refused it. A job that records no owner (submitted before jobs recorded one) is
// nobody's: users may not read or manage it, viewers and admins may.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/principals.h"

namespace gantry {

enum class Action {
  // The coordinator's job API (the gantry CLI).
  kSubmitJob,
  kReadJob,     // GetJob, WatchJob, a job in ListJobs
  kListJobs,    // the listing itself; each job in it is also kReadJob
  kCancelJob,
  kListWorkers,
  kListShardServers,
  kWhoAmI,
  kReadQuota,   // GetQuotas: a team's quota, use and queued jobs
  // Cluster-internal, on the coordinator.
  kAttach,      // a worker's session
  kRendezvous,  // RendezvousPut, RendezvousGet
  kRegisterShardServer,
  // The shard server's checkpoint store.
  kWriteCheckpoint,   // WriteChunks
  kCommitCheckpoint,  // Commit (the coordinator)
  kListCheckpoints,   // ListCheckpoints: each checkpoint listed is also kReadCheckpoint
  kReadCheckpoint,    // ReadChunks, a checkpoint in ListCheckpoints
  kDeleteCheckpoint,
  // The parameter server: its gRPC service and its data port.
  kParamServer,
};

// "submit a job", "cancel", "read checkpoints of", ...: for messages.
absl::string_view ActionName(Action action);

// What an action is on: the cluster, a team (its quota), or a job (its owner and team as the
// job records them; a checkpoint is its job's).
struct AuthzObject {
  std::string job_id;  // empty: the cluster as a whole
  std::string owner;   // the job's owner, "" if it records none
  std::string team;    // the job's team, "" if none

  static AuthzObject Cluster() { return {}; }
  static AuthzObject Team(std::string team) { return {"", "", std::move(team)}; }
  static AuthzObject Job(std::string id, std::string owner, std::string team) {
    return {std::move(id), std::move(owner), std::move(team)};
  }
  // "the cluster", "team vision", "job j-000003 (owner alice, team vision)", "job j-000003"
  // (none recorded).
  std::string Describe() const;
};

// OK if who may do action on object; else PERMISSION_DENIED, e.g. "user alice (team vision,
// role user) may not cancel job j-000003 (owner bob, team vision): users cancel only their
// own jobs". Pure and cheap (no lock, no allocation unless refused).
absl::Status Authorize(const Principal& who, Action action, const AuthzObject& object);

// Authorize(...).ok() for a job: the filter of listings.
bool MayReadJob(const Principal& who, absl::string_view owner, absl::string_view team);

}  // namespace gantry
