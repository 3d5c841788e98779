// sd_notify without libsystemd: the ready announcement reaches the socket systemd names in
// $NOTIFY_SOCKET (path or abstract), and the ready file is written.
#include "common/daemon.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/file_util.h"
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

}  // namespace
}  // namespace gantry
