#include "common/security.h"
#include "common/daemon.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <gflags/gflags.h>
#include <glog/logging.h>
#include <filesystem>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/file_util.h"
#include "common/kill_point.h"
#include "common/rpc_edge.h"

DEFINE_bool(list_kill_points, false,
            "print this daemon's kill points (for crash tests; arm one with GANTRY_KILL_AT=NAME[@N]) and exit");

namespace gantry {

sigset_t InitDaemon(int* argc, char*** argv, const char* usage) {
  gflags::SetUsageMessage(usage);
  gflags::ParseCommandLineFlags(argc, argv, true);
  google::InitGoogleLogging((*argv)[0]);
  FLAGS_logtostderr = true;
  // Abseil's mutexes (gRPC's, on every call's path) check each acquisition against a
  // process-wide lock graph unless told not to, and Debian's Abseil leaves the check on: a
  // few per cent of the coordinator's CPU under load (bench/control_plane_load), for a
  // debugging aid.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  return sigs;
}

std::optional<int> PrepareDataDir(const std::string& data_dir) {
  if (data_dir.empty()) {
    LOG(ERROR) << "--data_dir is required";
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) {
    LOG(ERROR) << "--data_dir " << data_dir << ": cannot create it: " << ec.message();
    return 1;
  }
  return std::nullopt;
}

std::optional<int> HandleKillPoints() {
  if (FLAGS_list_kill_points) {
    std::fputs(KillPointTable().c_str(), stdout);
    return 0;
  }
  if (auto s = ArmKillPointsFromEnv(); !s.ok()) {
    LOG(ERROR) << s;
    return 2;
  }
  if (const char* armed = std::getenv(kKillPointEnv); armed != nullptr && armed[0] != '\0') {
    LOG(WARNING) << "armed for a crash test: the process dies at kill point " << armed;
  }
  return std::nullopt;
}

absl::StatusOr<DaemonPrincipals> LoadDaemonPrincipals(const std::string& path) {
  std::string p = path;
  if (p.empty()) {
    const char* env = std::getenv("GANTRY_PRINCIPALS_FILE");
    if (env != nullptr) p = env;
  }
  if (p.empty()) return DaemonPrincipals{};
  if (!ProcessSecurity().server_tls()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "principals file ", p, ": a principals file needs TLS (GANTRY_TLS_CERT and GANTRY_TLS_KEY): its tokens "
        "would cross the network in clear"));
  }
  auto file = PrincipalsFile::Load(p);
  if (!file.ok()) return file.status();
  const auto set = (*file)->current();
  LOG(INFO) << "principals: " << p << ": " << set->size() << " identities";
  if (set->with_certificate() > 0 && ProcessSecurity().client_ca_pem.empty()) {
    LOG(WARNING) << "principals: " << set->with_certificate()
                 << " identities are named by a client certificate, but no client certificate is asked for "
                    "(GANTRY_TLS_CLIENT_CA is not set): they can use only their tokens";
  }
  SetProcessPrincipals(file->get());
  DaemonPrincipals d;
  d.file = std::move(*file);
  d.reload = [f = d.file.get()] { (void)f->Reload(); };
  return d;
}

int WaitForTermination(const sigset_t& signals, const std::function<void()>& on_hangup) {
  int sig = 0;
  while (true) {
    sigwait(&signals, &sig);
    if (sig != SIGHUP) break;
    if (on_hangup) {
      LOG(INFO) << "SIGHUP: reloading";
      on_hangup();
    } else {
      LOG(INFO) << "SIGHUP: nothing to reload";
    }
  }
  LOG(INFO) << "signal " << sig << ": shutting down";
  NotifySystemd("STOPPING=1");
  return sig;
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(const std::string& address, int max_message_bytes,
                                                              const std::vector<grpc::Service*>& services,
                                                              metrics::Registry* registry, const std::string& component,
                                                              int* port) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  AddRpcEdge(builder, registry, component);
  builder.AddListeningPort(address, ServerCredentials(), port);  // TLS when configured (common/security.h)
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  for (auto* s : services) builder.RegisterService(s);
  auto server = builder.BuildAndStart();
  if (!server || *port == 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  return server;
}

bool NotifySystemd(const std::string& state) {
  const char* where = std::getenv("NOTIFY_SOCKET");
  if (where == nullptr || where[0] == '\0') return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t n = std::strlen(where);
  if (n >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, where, n);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const ssize_t sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&addr),
                                static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + n));
  ::close(fd);
  return sent == static_cast<ssize_t>(state.size());
}

void WriteReadyFile(const std::string& path, int grpc_port, int metrics_port) {
  NotifySystemd(absl::StrCat("READY=1\nSTATUS=serving", grpc_port > 0 ? absl::StrCat(" gRPC on port ", grpc_port) : "",
                             ", metrics on port ", metrics_port));
  if (path.empty()) return;
  std::string text = "{";
  if (grpc_port > 0) absl::StrAppend(&text, "\"grpc_port\": ", grpc_port, ", ");
  absl::StrAppend(&text, "\"metrics_port\": ", metrics_port, "}\n");
  if (auto s = WriteFileAtomic(path, text); !s.ok()) LOG(ERROR) << s;
}

}  // namespace gantry
