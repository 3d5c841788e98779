#include "common/daemon.h"

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"

namespace gantry {

sigset_t InitDaemon(int* argc, char*** argv, const char* usage) {
  gflags::SetUsageMessage(usage);
  gflags::ParseCommandLineFlags(argc, argv, true);
  google::InitGoogleLogging((*argv)[0]);
  FLAGS_logtostderr = true;
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  return sigs;
}

int WaitForTermination(const sigset_t& signals) {
  int sig = 0;
  sigwait(&signals, &sig);
  LOG(INFO) << "signal " << sig << ": shutting down";
  return sig;
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(const std::string& address, int max_message_bytes,
                                                              const std::vector<grpc::Service*>& services, int* port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  for (auto* s : services) builder.RegisterService(s);
  auto server = builder.BuildAndStart();
  if (!server || *port == 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  return server;
}

void WriteReadyFile(const std::string& path, int grpc_port, int metrics_port) {
  if (path.empty()) return;
  std::string text = "{";
  if (grpc_port > 0) absl::StrAppend(&text, "\"grpc_port\": ", grpc_port, ", ");
  absl::StrAppend(&text, "\"metrics_port\": ", metrics_port, "}\n");
  if (auto s = WriteFileAtomic(path, text); !s.ok()) LOG(ERROR) << s;
}

}  // namespace gantry
