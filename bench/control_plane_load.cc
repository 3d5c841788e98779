// The control plane and the shard server under load (issue 23): bench/load/control_plane.h
// and bench/load/shard_streams.h say what runs and what is checked. Prints the tables and
// whether each target is met; exits 0 when every check passed and every target was met, 1
// when not, 2 when the run could not be made.
//
//   control_plane_load [--workers 1000] [--jobs 10000] [--shard-servers 2] [--submit-rate 250]
//                      [--steps 4] [--checkpoint-every 2] [--step-ms 50] [--part-bytes 4096]
//                      [--multi-rank-every 10] [--watchers 16] [--list-jobs-period 0.5] [--list-jobs-full-period 5]
//                      [--get-job-period 0.05] [--list-workers-period 1] [--restart-at 0.9]
//                      [--upload-threads 8] [--verify-jobs 200] [--worker-timeout-ms 5000]
//                      [--users 0] [--teams 10] [--no-quotas] [--tls]
//                      [--shard-streams 64] [--shard-mb 16] [--skip-fleet] [--skip-shard]
//                      [--progress] [--dir DIR] [--coordinator BIN] [--shardserver BIN]
// BIN default to this build's daemons. --users 100 --teams 10: the daemons serve TLS with a
// principals file of 100 users in 10 teams with quotas (one cohort), and the clients submit,
// list and get jobs as those users (bench/load/control_plane.h, ControlPlaneOptions::users);
// --no-quotas leaves the quotas out; --tls alone: TLS and the cluster token, no users (their peer).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench/load/control_plane.h"
#include "bench/load/shard_streams.h"

namespace {

std::string Flag(int argc, char** argv, const char* name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], name)) return argv[i + 1];
  }
  return def;
}
double Num(int argc, char** argv, const char* name, double def) {
  const std::string v = Flag(argc, argv, name, "");
  if (v.empty()) return def;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0') {
    std::fprintf(stderr, "control_plane_load: %s takes a number, not '%s'\n", name, v.c_str());
    std::exit(2);
  }
  return x;
}
bool Has(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], name)) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (Has(argc, argv, "--help")) {
    std::fprintf(stderr, "see the comment at the top of bench/control_plane_load.cc\n");
    return 0;
  }
  bool ok = true;
  if (!Has(argc, argv, "--skip-fleet")) {
    gantry::load::ControlPlaneOptions o;
    o.workers = static_cast<int>(Num(argc, argv, "--workers", o.workers));
    o.jobs = static_cast<int>(Num(argc, argv, "--jobs", o.jobs));
    o.shard_servers = static_cast<int>(Num(argc, argv, "--shard-servers", o.shard_servers));
    o.submit_rate = Num(argc, argv, "--submit-rate", o.submit_rate);
    o.steps = static_cast<int>(Num(argc, argv, "--steps", o.steps));
    o.checkpoint_every = static_cast<int>(Num(argc, argv, "--checkpoint-every", o.checkpoint_every));
    o.step_ms = static_cast<int>(Num(argc, argv, "--step-ms", o.step_ms));
    o.part_bytes = static_cast<int>(Num(argc, argv, "--part-bytes", o.part_bytes));
    o.multi_rank_every = static_cast<int>(Num(argc, argv, "--multi-rank-every", o.multi_rank_every));
    o.watchers = static_cast<int>(Num(argc, argv, "--watchers", o.watchers));
    o.list_jobs_period_s = Num(argc, argv, "--list-jobs-period", o.list_jobs_period_s);
    o.list_jobs_full_period_s = Num(argc, argv, "--list-jobs-full-period", o.list_jobs_full_period_s);
    o.get_job_period_s = Num(argc, argv, "--get-job-period", o.get_job_period_s);
    o.list_workers_period_s = Num(argc, argv, "--list-workers-period", o.list_workers_period_s);
    o.restart_at = Num(argc, argv, "--restart-at", o.restart_at);
    o.upload_threads = static_cast<int>(Num(argc, argv, "--upload-threads", o.upload_threads));
    o.verify_jobs = static_cast<int>(Num(argc, argv, "--verify-jobs", o.verify_jobs));
    o.users = static_cast<int>(Num(argc, argv, "--users", o.users));
    o.teams = static_cast<int>(Num(argc, argv, "--teams", o.teams));
    o.quotas = !Has(argc, argv, "--no-quotas");
    o.tls = Has(argc, argv, "--tls");
    o.worker_timeout_ms = static_cast<int64_t>(Num(argc, argv, "--worker-timeout-ms", static_cast<double>(o.worker_timeout_ms)));
    o.coordinator_bin = Flag(argc, argv, "--coordinator", GANTRY_COORDINATOR_BIN);
    o.shardserver_bin = Flag(argc, argv, "--shardserver", GANTRY_SHARDSERVER_BIN);
    o.dir = Flag(argc, argv, "--dir", "");
    o.progress = Has(argc, argv, "--progress");
    auto r = gantry::load::RunControlPlaneLoad(o);
    if (!r.ok()) {
      std::fprintf(stderr, "control_plane_load: %s\n", std::string(r.status().message()).c_str());
      return 2;
    }
    std::printf("%s", gantry::load::FormatReport(*r).c_str());
    std::fflush(stdout);
    ok = ok && gantry::load::TargetsMet(*r);
  }
  if (!Has(argc, argv, "--skip-shard")) {
    gantry::load::ShardStreamOptions o;
    o.streams = static_cast<int>(Num(argc, argv, "--shard-streams", o.streams));
    o.bytes = static_cast<int64_t>(Num(argc, argv, "--shard-mb", 16) * (1 << 20));
    o.shardserver_bin = Flag(argc, argv, "--shardserver", GANTRY_SHARDSERVER_BIN);
    const std::string dir = Flag(argc, argv, "--dir", "");
    if (!dir.empty()) o.dir = dir + "/shard_streams";
    auto r = gantry::load::RunShardStreams(o);
    if (!r.ok()) {
      std::fprintf(stderr, "control_plane_load: shard streams: %s\n", std::string(r.status().message()).c_str());
      return 2;
    }
    std::printf("%s", gantry::load::FormatReport(*r).c_str());
    ok = ok && gantry::load::TargetsMet(*r);
  }
  std::printf("all targets: %s\n", ok ? "met" : "NOT met");
  return ok ? 0 : 1;
}
