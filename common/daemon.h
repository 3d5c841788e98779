// What every Gantry daemon does at start and stop: flags, logging to stderr, SIGTERM and
// SIGINT taken by a waiting thread (graceful shutdown), SIGHUP by the same thread (reload),
// the principals file of a server daemon, a gRPC server with the standard health service and
// server reflection, and the ready file that scripts and tests read.
#pragma once

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "common/principals.h"

namespace gantry {

// Parses flags, starts glog on stderr, and blocks SIGTERM/SIGINT/SIGHUP in this thread and
// every thread created after (WaitForTermination takes them). Call first thing in main.
sigset_t InitDaemon(int* argc, char*** argv, const char* usage);

// The principals file of a server daemon (common/principals.h): `path` (its --principals
// flag), else $GANTRY_PRINCIPALS_FILE; neither: none (null, and calls are authenticated as
// before: the cluster token, or nothing on a laptop). Loaded and installed for the RPC edge
// (SetProcessPrincipals). A file that does not load, or a principals file without server TLS
// (GANTRY_TLS_CERT and GANTRY_TLS_KEY: its tokens would cross the network in clear), is an
// error: main logs it and returns 2. reload is SIGHUP's (WaitForTermination's on_hangup): the
// file read again, a bad one logged and the previous left in force; empty without a file.
struct DaemonPrincipals {
  std::unique_ptr<PrincipalsFile> file;
  std::function<void()> reload;
};
absl::StatusOr<DaemonPrincipals> LoadDaemonPrincipals(const std::string& path);

// Kill points (common/kill_point.h), for the daemons that have them; call after InitDaemon.
// With --list_kill_points, prints the binary's kill points ("NAME<TAB>before-commit|
// after-commit<TAB>DESCRIPTION", one a line) and returns 0: main returns it. Otherwise arms
// the process from $GANTRY_KILL_AT; a value that names no kill point of this binary is
// logged and returns 2. nullopt: go on.
std::optional<int> HandleKillPoints();

// The daemon's --data_dir: required (else logged, and 2: main returns it), created if
// missing (else logged, and 1). nullopt: go on.
std::optional<int> PrepareDataDir(const std::string& data_dir);

// Blocks until SIGTERM or SIGINT; returns the signal. A SIGHUP meanwhile calls on_hangup
// (the reload: PrincipalsFile::Reload), on this thread, and waits on; without one it is
// logged and ignored.
int WaitForTermination(const sigset_t& signals, const std::function<void()>& on_hangup = nullptr);

// Builds and starts a gRPC server on `address` (port 0 picks one) with health checking and
// reflection enabled, and the RPC edge's metrics and logs (common/rpc_edge.h) recorded in
// registry as gantry_<component>_*. *port receives the bound port.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpcServer(const std::string& address, int max_message_bytes,
                                                              const std::vector<grpc::Service*>& services,
                                                              metrics::Registry* registry, const std::string& component,
                                                              int* port);

// The daemon is serving: writes {"grpc_port": G, "metrics_port": M} (G omitted when 0)
// atomically to path, if set, and tells systemd (Type=notify) READY=1 with a STATUS line.
void WriteReadyFile(const std::string& path, int grpc_port, int metrics_port);

// sd_notify(3) without libsystemd: sends `state` ("READY=1", "STOPPING=1", ...) to the socket
// in $NOTIFY_SOCKET (a path, or @name for the abstract namespace). False when there is no
// such socket (not run by systemd) or the send fails.
bool NotifySystemd(const std::string& state);

}  // namespace gantry
