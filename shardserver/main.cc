// gantry-shardserver: checkpoint chunks in RocksDB. Announces itself to the coordinator
// (RegisterShardServer) at start and every --heartbeat_ms as its heartbeat.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <grpcpp/grpcpp.h>

#include <sys/statvfs.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <thread>

#include "common/security.h"
#include "common/daemon.h"
#include "common/grpc_util.h"
#include "common/metrics.h"
#include "gantry/v1/coordinator.grpc.pb.h"
#include "shardserver/param_service.h"
#include "shardserver/service.h"

DEFINE_string(listen, "127.0.0.1:7080", "gRPC address (port 0 picks one)");
DEFINE_string(advertise_host, "127.0.0.1", "host that workers and the CLI use to reach this server");
DEFINE_string(metrics_listen, "127.0.0.1:9480", "Prometheus /metrics address (port 0 picks one)");
DEFINE_string(data_dir, "", "directory of the chunk store; required");
DEFINE_string(coordinator, "", "coordinator address to register with (empty: stand alone)");
DEFINE_int32(heartbeat_ms, 1000, "registration heartbeat period");
DEFINE_string(ready_file, "", "once serving, write {\"grpc_port\": N, \"metrics_port\": M} here");
DEFINE_int32(max_message_bytes, 8 << 20, "largest gRPC message accepted");
DEFINE_double(data_message_timeout_s, 30,
              "data port: seconds a request may take from its first byte to its reply, plus its payload's time at "
              "--data_min_mb_per_s; a connection past it is closed");
DEFINE_double(data_min_mb_per_s, 16, "data port: the slowest payload transfer a deadline allows for (MB/s)");
DEFINE_int32(data_max_connections, 1024, "data port: connections served at once; more wait in the listen backlog");
DEFINE_string(principals, "",
              "the principals file (users, teams, roles, service identities; common/principals.h), read at start "
              "and again on SIGHUP; default $GANTRY_PRINCIPALS_FILE; neither: the cluster token or no checks");
DEFINE_int32(data_threads, 2, "data port: threads that run its event loop (each connection's requests stay in order)");

int main(int argc, char** argv) {
  const sigset_t sigs = gantry::InitDaemon(&argc, &argv, "gantry-shardserver --data_dir DIR [--coordinator HOST:PORT]");
  if (auto rc = gantry::HandleKillPoints()) return *rc;
  if (auto rc = gantry::PrepareDataDir(FLAGS_data_dir)) return *rc;
  auto principals = gantry::LoadDaemonPrincipals(FLAGS_principals);
  if (!principals.ok()) {
    LOG(ERROR) << principals.status();
    return 2;
  }
  gantry::metrics::Registry registry;
  auto svc = gantry::shardserver::ShardService::Open(FLAGS_data_dir + "/chunks", &registry);
  if (!svc.ok()) {
    LOG(ERROR) << svc.status();
    return 1;
  }
  auto http = gantry::metrics::HttpServer::Start(FLAGS_metrics_listen, &registry);
  if (!http.ok()) {
    LOG(ERROR) << http.status();
    return 1;
  }
  int port = 0;
  gantry::shardserver::ParamService params(&registry);  // parameter-server mode
  // The plain-TCP data port carries no TLS and no token: a secured cluster does without it
  // (parameter-server payloads then go over TLS gRPC).
  const gantry::SecurityConfig& security = gantry::ProcessSecurity();
  absl::StatusOr<std::string> data_port = std::string();
  if (security.server_tls() || !security.token.empty()) {
    LOG(INFO) << "TLS or a cluster token is configured: no plain-TCP data port";
  } else {
    gantry::net::StreamServer::Options options;
    options.message_timeout = std::chrono::milliseconds(static_cast<int64_t>(FLAGS_data_message_timeout_s * 1000));
    options.min_bytes_per_second = FLAGS_data_min_mb_per_s * 1e6;
    options.max_connections = static_cast<size_t>(std::max(0, FLAGS_data_max_connections));
    options.threads = FLAGS_data_threads;
    data_port = params.StartDataPort(FLAGS_listen.substr(0, FLAGS_listen.rfind(':')), options);
    if (!data_port.ok()) {
      LOG(ERROR) << data_port.status();
      return 1;
    }
    LOG(INFO) << "parameter-server data port on " << *data_port;
  }
  auto started = gantry::StartGrpcServer(FLAGS_listen, FLAGS_max_message_bytes, {svc->get(), &params}, &registry,
                                         "shardserver", &port);
  if (!started.ok()) {
    LOG(ERROR) << started.status();
    return 1;
  }
  auto& server = *started;
  const std::string address = FLAGS_advertise_host + ":" + std::to_string(port);
  LOG(INFO) << "gantry-shardserver serving on " << address << ", metrics on port " << (*http)->port();

  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  std::thread heartbeat;
  // The data directory's file system, for the disk-filling alert (deploy/prometheus).
  auto update_disk = [&] {
    struct statvfs fs;
    if (statvfs(FLAGS_data_dir.c_str(), &fs) != 0) return;
    registry.GetGauge("gantry_shardserver_disk_free_bytes", "Free bytes on the data directory's file system.")
        .Set(static_cast<double>(fs.f_bavail) * fs.f_frsize);
    registry.GetGauge("gantry_shardserver_disk_total_bytes", "Size of the data directory's file system.")
        .Set(static_cast<double>(fs.f_blocks) * fs.f_frsize);
  };
  update_disk();
  if (!FLAGS_coordinator.empty()) {
    heartbeat = std::thread([&] {
      auto stub = gantry::v1::Coordinator::NewStub(gantry::MakeChannel(FLAGS_coordinator));
      bool registered = false;
      while (!stop) {
        gantry::v1::RegisterShardServerRequest req;
        req.set_address(address);
        if (!data_port->empty()) req.set_data_address(FLAGS_advertise_host + data_port->substr(data_port->rfind(':')));
        req.set_bytes_stored((*svc)->bytes_stored());
        gantry::v1::RegisterShardServerResponse resp;
        auto s = stub->RegisterShardServer(gantry::ContextWithDeadline(2).get(), req, &resp);
        if (s.ok() != registered) {
          if (s.ok()) LOG(INFO) << "registered with coordinator " << FLAGS_coordinator;
          else LOG(WARNING) << "coordinator " << FLAGS_coordinator << " unreachable: " << s.error_message();
          registered = s.ok();
        }
        update_disk();
        std::unique_lock<std::mutex> l(mu);
        cv.wait_for(l, std::chrono::milliseconds(FLAGS_heartbeat_ms), [&] { return stop.load(); });
      }
    });
  }
  gantry::WriteReadyFile(FLAGS_ready_file, port, (*http)->port());
  gantry::WaitForTermination(sigs, principals->reload);  // SIGHUP: the principals file again
  {
    std::lock_guard<std::mutex> l(mu);
    stop = true;
  }
  cv.notify_all();
  if (heartbeat.joinable()) heartbeat.join();
  // The data port first: no new requests, those in progress end within the grace period.
  params.StopDataPort(std::chrono::seconds(5));
  LOG(INFO) << "data port stopped";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  return 0;
}
