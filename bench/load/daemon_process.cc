#include "bench/load/daemon_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"

namespace gantry::load {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool PinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

absl::StatusOr<DaemonProcess> SpawnDaemon(const std::string& name, const std::string& binary,
                                          std::vector<std::string> args, const std::string& dir, int cpu) {
  DaemonProcess d;
  d.name = name;
  d.log = (fs::path(dir) / (name + ".log")).string();
  d.ready = (fs::path(dir) / (name + ".ready")).string();
  std::error_code ec;
  fs::remove(d.ready, ec);  // a restart's ready file is the new process's
  args.insert(args.begin(), binary);
  args.push_back("--ready_file");
  args.push_back(d.ready);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // Appended to: a restarted daemon's log follows its predecessor's.
  const int fd = ::open(d.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot create ", d.log, ": ", std::strerror(errno)));
  d.pid = ::fork();
  if (d.pid < 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (d.pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (cpu >= 0 && !PinToCpu(cpu)) _exit(126);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(fd);
  return d;
}

absl::Status WaitReady(DaemonProcess& d, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  for (;;) {
    // The ready file is written atomically (renamed into place) once the daemon serves.
    if (auto text = ReadFileToString(d.ready); text.ok()) {
      const auto at = text->find("\"grpc_port\": ");
      if (at != std::string::npos) {
        d.port = std::atoi(text->c_str() + at + 13);
        return absl::OkStatus();
      }
    }
    int status = 0;
    if (::waitpid(d.pid, &status, WNOHANG) == d.pid) {
      d.pid = -1;
      return absl::UnavailableError(absl::StrCat(d.name, " exited before it was ready; its log:\n", Tail(d.log)));
    }
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(d.name, " not ready within ", timeout_s, " s; its log:\n", Tail(d.log)));
    }
    // Polling a file for a state, with a deadline: the daemon has no other way to say it.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void KillDaemon(DaemonProcess& d) {
  if (d.pid <= 0) return;
  ::kill(d.pid, SIGKILL);
  int status = 0;
  ::waitpid(d.pid, &status, 0);
  d.pid = -1;
}

int StopDaemon(DaemonProcess& d, double timeout_s) {
  if (d.pid <= 0) return 0;
  ::kill(d.pid, SIGTERM);
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  int status = 0;
  for (;;) {
    if (::waitpid(d.pid, &status, WNOHANG) == d.pid) break;
    if (Clock::now() > deadline) {
      ::kill(d.pid, SIGKILL);
      ::waitpid(d.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // reaping with a deadline
  }
  d.pid = -1;
  return status;
}

Memory MemoryOf(pid_t pid) {
  Memory m;
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    auto kb = [&](const char* key) -> int64_t {
      return line.rfind(key, 0) == 0 ? std::atoll(line.c_str() + std::strlen(key)) * 1024 : -1;
    };
    if (int64_t v = kb("VmRSS:"); v >= 0) m.rss = v;
    if (int64_t v = kb("VmHWM:"); v >= 0) m.peak = v;
  }
  return m;
}

int64_t CpuTicksOf(pid_t pid) {
  std::ifstream file(absl::StrCat("/proc/", pid, "/stat"));  // size 0 to stat(): read as a stream
  std::string stat;
  std::getline(file, stat);
  const size_t comm_end = stat.rfind(')');
  if (comm_end == std::string::npos) return 0;
  // After "(comm)", fields from the third on; utime and stime are the 14th and 15th.
  std::istringstream in(stat.substr(comm_end + 1));
  std::string field;
  int64_t ticks = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::atoll(field.c_str());
  }
  return ticks;
}

double CpuSecondsOf(pid_t pid) {
  return static_cast<double>(CpuTicksOf(pid)) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

int64_t DirBytes(const std::string& dir) {
  int64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2)) n += static_cast<int64_t>(it->file_size(e2));
  }
  return n;
}

std::string Tail(const std::string& path, size_t bytes) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return "";
  return text->substr(text->size() > bytes ? text->size() - bytes : 0);
}

}  // namespace gantry::load
