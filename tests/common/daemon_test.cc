// sd_notify without libsystemd: the ready announcement reaches the socket systemd names in
// $NOTIFY_SOCKET (path or abstract), and the ready file is written. SIGHUP calls the reload
// and the daemon waits on; a principals file without TLS is refused.
#include "common/daemon.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <pthread.h>
#include <signal.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/file_util.h"
#include "common/security.h"
#include "tests/test_util.h"

namespace gantry {
namespace {

// A datagram socket bound at `name` (a path, or @abstract); returns the fd.
int Listen(const std::string& name) {
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, name.data(), name.size());
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size())), 0)
      << std::strerror(errno);
  return fd;
}

std::string Receive(int fd) {
  char buf[512];
  const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

TEST(DaemonTest, ReadinessReachesSystemdsSocketAndTheReadyFile) {
  testing::TempDir dir;
  ::unsetenv("NOTIFY_SOCKET");
  EXPECT_FALSE(NotifySystemd("READY=1")) << "not run by systemd: nothing to tell";
  const std::string path = dir.File("notify");
  const int fd = Listen(path);
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  WriteReadyFile(dir.File("ready.json"), 7070, 9090);
  EXPECT_EQ(Receive(fd), "READY=1\nSTATUS=serving gRPC on port 7070, metrics on port 9090");
  EXPECT_EQ(*ReadFileToString(dir.File("ready.json")), "{\"grpc_port\": 7070, \"metrics_port\": 9090}\n");
  ::close(fd);
  const std::string abstract = "@gantry-test-" + std::to_string(::getpid());
  const int afd = Listen(abstract);
  ::setenv("NOTIFY_SOCKET", abstract.c_str(), 1);
  EXPECT_TRUE(NotifySystemd("STOPPING=1"));
  EXPECT_EQ(Receive(afd), "STOPPING=1");
  ::close(afd);
  ::unsetenv("NOTIFY_SOCKET");
}

TEST(DaemonTest, SighupReloadsAndTheDaemonWaitsOn) {
  sigset_t sigs, old;
  sigemptyset(&sigs);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&sigs, s);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &sigs, &old), 0);
  // SIGHUP pending; the reload raises SIGTERM, which ends the wait.
  ASSERT_EQ(pthread_kill(pthread_self(), SIGHUP), 0);
  int reloads = 0;
  const int sig = WaitForTermination(sigs, [&] {
    ++reloads;
    pthread_kill(pthread_self(), SIGTERM);
  });
  EXPECT_EQ(sig, SIGTERM);
  EXPECT_EQ(reloads, 1);
  // Without a reload, SIGHUP is ignored: still waiting for SIGTERM.
  ASSERT_EQ(pthread_kill(pthread_self(), SIGHUP), 0);
  ASSERT_EQ(pthread_kill(pthread_self(), SIGINT), 0);
  EXPECT_EQ(WaitForTermination(sigs), SIGINT);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

TEST(DaemonTest, APrincipalsFileNeedsTls) {
  ::unsetenv("GANTRY_PRINCIPALS_FILE");
  auto none = LoadDaemonPrincipals("");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->file, nullptr) << "nothing configured: no principals";
  EXPECT_FALSE(none->reload) << "and nothing to reload on SIGHUP";
  auto plain = LoadDaemonPrincipals("/etc/gantry/principals.yaml");
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("a principals file needs TLS (GANTRY_TLS_CERT and GANTRY_TLS_KEY)"),
            std::string::npos)
      << plain.status();
  EXPECT_EQ(ProcessPrincipals(), nullptr);
}

}  // namespace
}  // namespace gantry
