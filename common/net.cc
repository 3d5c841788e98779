#include "common/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace gantry::net {

absl::StatusOr<int> Listen(const std::string& host, int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(*port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat("listen: '", host, "' is not an IPv4 address"));
  }
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("listening on ", host, ":", *port, ": ", std::strerror(err)));
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

absl::StatusOr<int> Connect(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not host:port"));
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (int e = ::getaddrinfo(address.substr(0, colon).c_str(), address.substr(colon + 1).c_str(), &hints, &res); e != 0) {
    return absl::UnavailableError(absl::StrCat("resolving ", address, ": ", gai_strerror(e)));
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : ::connect(fd, res->ai_addr, res->ai_addrlen);
  int err = errno;
  if (rc != 0 && fd >= 0 && err == EINTR) {
    // A signal interrupted connect, and the connection goes on in the background (POSIX):
    // wait for it and take its outcome, rather than fail one that may yet succeed (found by
    // tests/fuzz/param_wire_fuzz, whose timer signal interrupts connects).
    pollfd p{fd, POLLOUT, 0};
    int r;
    while ((r = ::poll(&p, 1, -1)) < 0 && errno == EINTR) {
    }
    socklen_t len = sizeof(err);
    if (r == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0) {
      rc = err == 0 ? 0 : -1;
    } else {
      err = errno;
    }
  }
  ::freeaddrinfo(res);
  if (rc != 0) {
    if (fd >= 0) ::close(fd);
    return absl::UnavailableError(absl::StrCat("connecting to ", address, ": ", std::strerror(err)));
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

absl::Status SendAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return absl::UnavailableError("the peer closed the connection");
    if (r < 0) return absl::UnavailableError(absl::StrCat("recv: ", std::strerror(errno)));
    p += r;
    n -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace gantry::net
