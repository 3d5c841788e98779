// A TCP server for a binary request/reply protocol on one Asio event loop (standalone Asio,
// Debian's libasio-dev; docs/decisions.md says why): the parameter server's data port.
//
// The protocol is written as callbacks over StreamConnection: wait for a message, read
// exactly n bytes, write buffers, end the message. The loop runs on Options::threads threads;
// each connection is a strand of it, so one connection's callbacks run one at a time (no lock
// needed for its own state) while different connections' run at once on different threads.
// What the server guarantees around them:
//   - a deadline per message: from its first byte to its end (EndMessage), at most
//     message_timeout plus the time its payload takes at min_bytes_per_second (Expect says how
//     many bytes the message moves); past it the outstanding read or write (and any after
//     it) fails with DEADLINE_EXCEEDED, and the connection closes once that callback has run,
//     so a peer that stalls half-way holds nothing for long, and the protocol has undone its
//     part of the message before the peer sees the close. Between messages a connection may
//     idle.
//   - back-pressure, no unbounded buffers: a connection reads only what its protocol asks for,
//     into the protocol's own memory, and the next message only after the reply is written;
//     at max_connections the server stops accepting (further peers wait in the kernel's
//     backlog) until a connection closes.
//   - a clean stop: Stop closes the listener and the idle connections at once, lets messages
//     in progress end within a grace period (then closes them), and joins the loop.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gantry::net {

// Bytes to write, in order (a gather write).
struct ConstBytes {
  const void* data;
  size_t size;
};

// One accepted connection. Every method must be called, and every callback runs, on the
// connection's strand (the server's Accept callback runs there too); the protocol keeps the connection alive by holding its shared_ptr
// (callbacks capture it), and the connection closes when the last holder lets it go. At most
// one read and one write are outstanding at a time.
class StreamConnection {
 public:
  using Done = std::function<void(absl::Status)>;
  virtual ~StreamConnection() = default;

  // Calls done once the next message's first byte has arrived (OK), or with UNAVAILABLE when
  // the peer closed or the server is stopping. No deadline: a connection may idle between
  // messages. Starts the message's deadline.
  virtual void AwaitMessage(Done done) = 0;
  // The message moves `bytes` of payload (either way): its deadline grows by their time at
  // the configured minimum rate.
  virtual void Expect(size_t bytes) = 0;
  // Reads exactly n bytes into data (valid until done runs). Errors: UNAVAILABLE (the peer
  // closed, the connection broke, the server stopped), DEADLINE_EXCEEDED.
  virtual void Read(void* data, size_t n, Done done) = 0;
  // Writes every buffer, in order (each valid until done runs); errors as Read's.
  virtual void Write(std::vector<ConstBytes> buffers, Done done) = 0;
  // The message is over: its deadline is off.
  virtual void EndMessage() = 0;
  // Closes the connection now; outstanding operations end with UNAVAILABLE.
  virtual void Close() = 0;
  // "host:port" of the peer, for logs and errors.
  virtual const std::string& peer() const = 0;
};

// The completion condition of every read and write of a whole buffer, server and client:
// as much as the socket takes per system call (not Asio's default 64 KiB).
size_t TransferAll(const std::error_code& ec, size_t transferred);

class StreamServer {
 public:
  struct Options {
    std::chrono::milliseconds message_timeout{30000};
    double min_bytes_per_second = 16e6;  // a message's payload must move at least this fast
    size_t max_connections = 1024;
    int backlog = 1024;  // listen(2)'s: connections the kernel holds beyond max_connections
    // Threads that run the loop. With one, a single core makes every connection's read and
    // write system calls (the kernel's copies out of and into the sockets): on 2 cores one
    // thread pulled 1.6x slower than two at 8 and 64 workers (docs/perf/cluster.md, "On one CPU").
    int threads = 2;
  };
  // Called on the new connection's strand for each accepted connection.
  using Accept = std::function<void(std::shared_ptr<StreamConnection>)>;

  // Listens on host:port (an IPv4 or IPv6 literal; port 0 picks one) and starts the loop's
  // threads. Errors name the address.
  static absl::StatusOr<std::unique_ptr<StreamServer>> Start(const std::string& host, int port, Options options,
                                                             Accept accept);
  // Stop(0) if not stopped.
  ~StreamServer();
  StreamServer(const StreamServer&) = delete;
  StreamServer& operator=(const StreamServer&) = delete;

  // The bound port.
  int port() const { return port_; }
  // Stops accepting and closes idle connections now; messages in progress may end within
  // `grace` (their replies are written), then every connection is closed. Returns once the
  // loop's threads have ended. Any thread but the loop's; a second call does nothing.
  void Stop(std::chrono::milliseconds grace);
  // Connections open now, and the number of times a message's deadline closed one (tests,
  // metrics). Any thread.
  size_t open_connections() const;
  uint64_t deadlines_exceeded() const;

  struct Loop;  // the io_context, the acceptor's strand and the open connections (stream_server.cc)

 private:
  StreamServer() = default;
  std::shared_ptr<Loop> loop_;
  std::vector<std::thread> threads_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace gantry::net
