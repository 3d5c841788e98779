// gantry-coordinator: the cluster's job queue, scheduler, worker membership and shard-server
// registry. Jobs and events live in RocksDB under --data_dir.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <functional>

#include "common/daemon.h"
#include "common/metrics.h"
#include "coordinator/cluster.h"
#include "coordinator/service.h"
#include "coordinator/store.h"
#include "jobspec/cluster.h"

DEFINE_string(listen, "127.0.0.1:7070", "gRPC address (host:port; port 0 picks one)");
DEFINE_string(metrics_listen, "127.0.0.1:9470", "Prometheus /metrics address (port 0 picks one)");
DEFINE_string(data_dir, "", "directory of the coordinator's RocksDB (jobs, events); required");
DEFINE_string(ready_file, "", "once serving, write {\"grpc_port\": N, \"metrics_port\": M} here");
DEFINE_int32(max_message_bytes, 4 << 20, "largest gRPC message accepted");
DEFINE_int32(worker_timeout_ms, 5000, "a worker silent this long is declared dead");
DEFINE_int32(dead_worker_retention_s, 600, "a dead worker stays listed this long, then its record is dropped");
DEFINE_string(principals, "",
              "the principals file (users, teams, roles, service identities; common/principals.h), read at start "
              "and again on SIGHUP; default $GANTRY_PRINCIPALS_FILE; neither: the cluster token or no checks");
DEFINE_string(cluster, "",
              "the cluster jobs with parallel: auto are planned on: a preset (dgx-h100, dgx-h200, dgx-a100) or a "
              "cluster YAML file (gantry-train calibrate writes one); empty: a default of the workers' device kind");

DEFINE_double(preemption_grace_s, 120,
              "how long a preempted job has to checkpoint before it is stopped and resumes from its last committed "
              "checkpoint (a job's scheduling.preemption_grace_s overrides it)");

int main(int argc, char** argv) {
  const sigset_t sigs = gantry::InitDaemon(&argc, &argv, "gantry-coordinator --data_dir DIR [--listen HOST:PORT]");
  if (auto rc = gantry::HandleKillPoints()) return *rc;
  if (auto rc = gantry::PrepareDataDir(FLAGS_data_dir)) return *rc;
  auto principals = gantry::LoadDaemonPrincipals(FLAGS_principals);
  if (!principals.ok()) {
    LOG(ERROR) << principals.status();
    return 2;
  }
  auto store = gantry::coordinator::Store::Open(FLAGS_data_dir + "/db");
  if (!store.ok()) {
    LOG(ERROR) << store.status();
    return 1;
  }
  gantry::metrics::Registry registry;
  gantry::coordinator::ClusterOptions options;
  options.worker_timeout_ms = FLAGS_worker_timeout_ms;
  options.dead_worker_retention_ms = int64_t{FLAGS_dead_worker_retention_s} * 1000;
  options.shard_timeout_ms = 3 * 1000;
  if (!(FLAGS_preemption_grace_s > 0)) {
    LOG(ERROR) << "--preemption_grace_s must be > 0 seconds, not " << FLAGS_preemption_grace_s;
    return 2;
  }
  options.preemption_grace_ms = static_cast<int64_t>(FLAGS_preemption_grace_s * 1000);
  if (!FLAGS_cluster.empty()) {
    auto cluster = gantry::jobspec::LoadCluster(FLAGS_cluster);
    if (!cluster.ok()) {
      LOG(ERROR) << "--cluster: " << cluster.status();
      return 2;
    }
    options.planner_cluster = *std::move(cluster);
  }
  if (principals->file) {  // the teams' quotas, as the file in force gives them
    options.quotas = [file = principals->file.get()]() -> std::shared_ptr<const gantry::TeamQuotas> {
      auto set = file->current();
      return std::shared_ptr<const gantry::TeamQuotas>(set, &set->teams());
    };
  }
  gantry::coordinator::Cluster cluster(store->get(), &registry, options);
  if (auto s = cluster.Recover(); !s.ok()) {
    LOG(ERROR) << s;
    return 1;
  }
  gantry::coordinator::CoordinatorService service(store->get(), &cluster, &registry);
  auto http = gantry::metrics::HttpServer::Start(FLAGS_metrics_listen, &registry);
  if (!http.ok()) {
    LOG(ERROR) << http.status();
    return 1;
  }
  int port = 0;
  auto server = gantry::StartGrpcServer(FLAGS_listen, FLAGS_max_message_bytes, {&service}, &registry, "coordinator", &port);
  if (!server.ok()) {
    LOG(ERROR) << server.status();
    return 1;
  }
  LOG(INFO) << "gantry-coordinator serving gRPC on port " << port << ", metrics on port " << (*http)->port()
            << ", data in " << FLAGS_data_dir;
  gantry::WriteReadyFile(FLAGS_ready_file, port, (*http)->port());
  // SIGHUP: the principals file again, and a pass for the quotas it may have changed.
  std::function<void()> reload;
  if (principals->reload) {
    reload = [&] {
      principals->reload();
      cluster.RequestSchedule();
    };
  }
  gantry::WaitForTermination(sigs, reload);
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  (*server)->Wait();
  LOG(INFO) << "stopped";
  return 0;
}
