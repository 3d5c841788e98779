// The control-plane load test (issue 23): a simulated fleet in this process talking real
// gRPC to a real gantry-coordinator and real gantry-shardservers (child processes, port 0,
// a temporary directory).
//
//   - W workers attach as gantry-worker does (an Attach stream each, on their own TCP
//     connection: registration, heartbeats, step reports, checkpoint parts, ends of job),
//     heartbeat every second, and re-attach with the worker's back-off when their stream
//     breaks.
//   - J jobs are submitted (SubmitJob, open loop at a fixed rate); the coordinator queues and
//     gang-places them (one job in multi_rank_every has dp 2). A stand-in trainer runs each
//     placed rank: a step report per step (rank 0, as a real session), and every
//     checkpoint_every steps this rank's checkpoint files streamed to the shard servers of its
//     slices (shardserver::UploadSources, the real checkpoint path; rank 0 adds manifest.json and
//     config.json) and its CheckpointPart sent, so that the coordinator commits each
//     checkpoint on the shard servers; then its JobDone.
//   - Meanwhile clients call ListJobs, GetJob and ListWorkers at fixed rates (open loop: a
//     call's latency counts from when it was due) and watchers follow jobs with WatchJob.
//   - Once every job is submitted and restart_at of them have finished, the coordinator is
//     SIGKILLed and started again on its port with its RocksDB, and the test measures how
//     long until every worker has re-attached and until the interrupted jobs step again.
//
// Checked throughout and at the end (Report::violations): no job lost (every job SubmitJob
// acknowledged exists after the restart and ends SUCCEEDED with all its steps and its last
// checkpoint recorded), none placed twice (no (job, generation, rank) assigned twice, no
// generation of a job started while another ran to its end, no worker given a job while it
// runs one, no job run to its end twice), every watched job's events in order, and every
// checkpoint whole on the shard servers with its bytes as written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/load/daemon_process.h"

namespace gantry::load {

struct ControlPlaneOptions {
  int workers = 1000;
  int jobs = 10000;
  int shard_servers = 2;
  double submit_rate = 250;   // SubmitJob calls per second (open loop)
  int steps = 4;              // each job's train.steps
  int checkpoint_every = 2;   // its checkpoint.every
  int step_ms = 50;           // the stand-in trainer's step time
  int heartbeat_ms = 1000;    // gantry-worker's default
  int part_bytes = 4096;      // each checkpoint file of a rank (per slice)
  int multi_rank_every = 10;  // every Nth job has dp 2 (0: none)
  double list_jobs_period_s = 0.5;       // ListJobs as `gantry jobs` asks (brief: no spec texts)
  double list_jobs_full_period_s = 5.0;  // ListJobs with every field, as `gantry jobs -o json`
  double get_job_period_s = 0.05;
  double list_workers_period_s = 1.0;
  int watchers = 16;          // concurrent WatchJob clients
  double restart_at = 0.9;    // fraction of jobs finished when the coordinator is killed (0: never)
  int upload_threads = 8;     // the stand-in trainers' checkpoint uploads in flight
  int verify_jobs = 200;      // jobs whose checkpoints are read back byte for byte (-1: all)
  int64_t worker_timeout_ms = 5000;  // the coordinator's --worker_timeout_ms
  // Users and quotas (issue 50 item 5): with users > 0 the daemons serve TLS with the cluster
  // token and a principals file naming `users` users (role user) in `teams` teams, each team a
  // quota of workers / teams cpu slots, all in one cohort (so quotas, the fair share and
  // borrowing are all in force); SubmitJob, the brief ListJobs and GetJob are called as those
  // users (spec i by user i % users, the listing by each in turn, GetJob by the job's
  // submitter), with their tokens; the fleet, the full listing, ListWorkers and the watchers
  // call with the cluster token (an admin). 0: no TLS, no token, no principals (a laptop
  // cluster: every call the laptop's admin).
  int users = 0;
  int teams = 10;
  bool quotas = true;  // with users: false leaves the teams: section out (TLS and users alone)
  // Without users: TLS and the cluster token, no principals file (every call an admin): the
  // peer of a run with users, which pays for TLS too.
  bool tls = false;
  std::string coordinator_bin, shardserver_bin;
  std::string dir;            // empty: a temporary directory, removed at the end
  bool progress = false;      // a line on stderr every few seconds
};

struct MethodStats {
  std::string method;
  int64_t calls = 0, errors = 0;
  double rate = 0;  // calls per second over the phase
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
};

struct ControlPlaneReport {
  ControlPlaneOptions options;
  // Before the kill (the steady state with the whole load), and after the restart.
  std::vector<MethodStats> steady, after_restart;
  double steady_seconds = 0;
  int64_t placements = 0;               // jobs placed (first rank's assignment) before the kill
  double placements_per_second = 0;     // over the steady phase
  double peak_placements_per_second = 0;  // the best 5 s window
  double submit_to_placed_p50_ms = 0, submit_to_placed_p99_ms = 0;
  int64_t max_queued = 0;               // jobs submitted and not yet placed, at most
  int64_t list_bytes = 0, list_full_bytes = 0;  // the largest ListJobs responses (brief, full)
  Memory coordinator_memory;            // at the kill (rss, and its peak so far)
  double coordinator_cpu_seconds = 0, fleet_cpu_seconds = 0, shard_cpu_seconds = 0;  // steady phase
  double machine_load = 0;  // the 1-minute load average at the end of the steady phase (other work included)
  int64_t rocksdb_bytes = 0;            // the coordinator's RocksDB directory at the kill
  int64_t rocksdb_bytes_end = 0;
  // The restart.
  bool restarted = false;
  double ready_s = 0;                 // from the SIGKILL until the new coordinator serves
  double reattached_s = 0;            // from the new process's start until every worker re-attached
  double reattached_from_kill_s = 0;  // the same, from the SIGKILL
  int interrupted_jobs = 0;           // jobs running at the kill
  double first_resumed_s = 0;         // from the SIGKILL to the first step of a job placed again
  double all_resumed_s = 0;           // ... until every interrupted job has stepped again
  Memory coordinator_memory_end;
  double total_seconds = 0;
  // Checks.
  int64_t jobs_submitted = 0, jobs_succeeded = 0;
  int64_t checkpoints_committed = 0;  // on the shard servers, whole, over all jobs
  int64_t checkpoints_verified = 0, bytes_verified = 0;
  int64_t watched_jobs = 0;
  // Jobs whose ranks had all ended before the SIGKILL but whose SUCCEEDED was not stored
  // yet: placed again after the restart, they ran to their end twice (at-least-once; one
  // placed again after a client saw it SUCCEEDED is a violation).
  int64_t jobs_run_twice = 0;
  std::vector<std::string> violations;
};

absl::StatusOr<ControlPlaneReport> RunControlPlaneLoad(const ControlPlaneOptions& options);

// The report as tables, and each target of issue 23 met or not (targets: the steady phase's
// Heartbeat and SubmitJob p99 <= 50 ms, ListJobs p99 <= 200 ms, re-attachment <= 10 s).
std::string FormatReport(const ControlPlaneReport& r);
bool TargetsMet(const ControlPlaneReport& r);

}  // namespace gantry::load
