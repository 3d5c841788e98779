// Gantry daemons run as child processes for the load tests: started with port 0 (or a given
// port, to restart a coordinator where its workers look for it), a ready file to learn the
// port, SIGKILL or SIGTERM to stop, and /proc for their memory and CPU.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gantry::load {

struct DaemonProcess {
  pid_t pid = -1;
  std::string name;
  std::string log;    // its stdout and stderr
  std::string ready;  // the ready file it writes once serving
  int port = 0;       // its gRPC port, once ready
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

// Starts binary with args (plus --ready_file) in the background; the child dies with this
// process (PR_SET_PDEATHSIG). Its output is appended to dir/<name>.log. cpu >= 0 pins it to
// that CPU (a child that cannot be pinned exits 126).
absl::StatusOr<DaemonProcess> SpawnDaemon(const std::string& name, const std::string& binary,
                                          std::vector<std::string> args, const std::string& dir, int cpu = -1);
// Pins the calling process (and the threads it makes later) to one CPU; false if it cannot.
bool PinToCpu(int cpu);
// Waits until the daemon's ready file names its port (a daemon that exits first, or is not
// ready within timeout_s, is an error with the tail of its log).
absl::Status WaitReady(DaemonProcess& d, double timeout_s = 120);
// SIGKILL (a crash) and reap.
void KillDaemon(DaemonProcess& d);
// SIGTERM (a clean stop) and reap; SIGKILL after timeout_s. Returns its exit status.
int StopDaemon(DaemonProcess& d, double timeout_s = 30);

// The resident set (VmRSS) and its peak (VmHWM) of a process, in bytes (0 if unknown).
struct Memory {
  int64_t rss = 0, peak = 0;
};
Memory MemoryOf(pid_t pid);
// CPU time (user + system) a process has used, in clock ticks (0 if unknown) and in seconds.
int64_t CpuTicksOf(pid_t pid);
double CpuSecondsOf(pid_t pid);
// The bytes of the regular files under dir (a RocksDB: SST, WAL, MANIFEST, logs).
int64_t DirBytes(const std::string& dir);
// The last bytes of a file (a daemon's log, for an error message).
std::string Tail(const std::string& path, size_t bytes = 3000);

}  // namespace gantry::load
