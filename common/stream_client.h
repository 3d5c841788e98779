// The client side of a StreamServer's protocols (common/stream_server.h): one TCP connection
// with blocking calls, each bounded by a deadline (standalone Asio, run until the operation
// completes or its deadline passes; a call past its deadline closes the connection).
// Errors name the peer: UNAVAILABLE (refused, closed, broken), DEADLINE_EXCEEDED.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/stream_server.h"

namespace gantry::net {

class StreamClient {
 public:
  using Deadline = std::chrono::steady_clock::time_point;
  // A connection to "host:port" (TCP_NODELAY).
  static absl::StatusOr<std::unique_ptr<StreamClient>> Connect(const std::string& address, Deadline deadline);
  ~StreamClient();
  StreamClient(const StreamClient&) = delete;
  StreamClient& operator=(const StreamClient&) = delete;

  // Writes every buffer, in order.
  absl::Status Send(const std::vector<ConstBytes>& buffers, Deadline deadline);
  // Reads exactly n bytes.
  absl::Status Receive(void* data, size_t n, Deadline deadline);
  // Reads what has arrived, up to n bytes, waiting for at least one: the count, 0 once the
  // peer has closed.
  absl::StatusOr<size_t> ReceiveSome(void* data, size_t n, Deadline deadline);
  // No more bytes from this side (the peer reads the end); receiving goes on.
  void CloseSend();
  bool open() const;
  const std::string& peer() const { return peer_; }

 private:
  struct Impl;
  StreamClient(std::unique_ptr<Impl> impl, std::string peer);
  std::unique_ptr<Impl> impl_;
  std::string peer_;
};

}  // namespace gantry::net
