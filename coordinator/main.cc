// gantry-coordinator: the cluster's job queue and (soon) scheduler. This first version
// accepts, stores, lists and cancels jobs durably; placement on workers comes next.
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>

#include "common/file_util.h"
#include "common/metrics.h"
#include "coordinator/cluster.h"
#include "coordinator/service.h"
#include "coordinator/store.h"

DEFINE_string(listen, "127.0.0.1:7070", "gRPC address (host:port; port 0 picks one)");
DEFINE_string(metrics_listen, "127.0.0.1:9470", "Prometheus /metrics address (port 0 picks one)");
DEFINE_string(data_dir, "", "directory of the coordinator's RocksDB (jobs, events); required");
DEFINE_string(ready_file, "", "once serving, write {\"grpc_port\": N, \"metrics_port\": M} here");
DEFINE_int32(max_message_bytes, 4 << 20, "largest gRPC message accepted");
DEFINE_int32(worker_timeout_ms, 5000, "a worker silent this long is declared dead");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("gantry-coordinator --data_dir DIR [--listen HOST:PORT]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (FLAGS_data_dir.empty()) {
    LOG(ERROR) << "--data_dir is required";
    return 2;
  }
  // SIGTERM / SIGINT are taken by sigwait below, so block them before any thread starts.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  std::error_code ec;
  std::filesystem::create_directories(FLAGS_data_dir, ec);
  auto store = gantry::coordinator::Store::Open(FLAGS_data_dir + "/db");
  if (!store.ok()) {
    LOG(ERROR) << store.status();
    return 1;
  }
  gantry::metrics::Registry registry;
  gantry::coordinator::Cluster cluster(store->get(), &registry, {FLAGS_worker_timeout_ms, 3 * 1000});
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
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(FLAGS_listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(FLAGS_max_message_bytes);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    LOG(ERROR) << "cannot listen on " << FLAGS_listen;
    return 1;
  }
  LOG(INFO) << "gantry-coordinator serving gRPC on port " << port << ", metrics on port "
            << (*http)->port() << ", data in " << FLAGS_data_dir;
  if (!FLAGS_ready_file.empty()) {
    const std::string ready = "{\"grpc_port\": " + std::to_string(port) +
                              ", \"metrics_port\": " + std::to_string((*http)->port()) + "}\n";
    if (auto s = gantry::WriteFileAtomic(FLAGS_ready_file, ready); !s.ok()) LOG(ERROR) << s;
  }
  int sig = 0;
  sigwait(&sigs, &sig);
  LOG(INFO) << "signal " << sig << ": shutting down";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  server->Wait();
  LOG(INFO) << "stopped";
  return 0;
}
