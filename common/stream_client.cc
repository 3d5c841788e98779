#include "common/stream_client.h"

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <optional>

#include "absl/strings/str_cat.h"

namespace gantry::net {

namespace {
using asio::ip::tcp;
}

struct StreamClient::Impl {
  asio::io_context io{1};
  tcp::socket socket{io};

  // Runs the operation started on io until it has completed (*result set) or the deadline
  // passed; then the socket is closed, which ends the operation, and DEADLINE_EXCEEDED.
  absl::Status RunUntil(const std::optional<asio::error_code>& result, Deadline deadline) {
    io.restart();
    while (!result.has_value() && std::chrono::steady_clock::now() < deadline) io.run_one_until(deadline);
    if (result.has_value()) return absl::OkStatus();
    asio::error_code ec;
    socket.close(ec);
    io.restart();
    while (!result.has_value()) io.run_one();  // the aborted operation's handler
    return absl::DeadlineExceededError("deadline exceeded");
  }
};

StreamClient::StreamClient(std::unique_ptr<Impl> impl, std::string peer) : impl_(std::move(impl)), peer_(std::move(peer)) {}
StreamClient::~StreamClient() = default;

absl::StatusOr<std::unique_ptr<StreamClient>> StreamClient::Connect(const std::string& address, Deadline deadline) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  auto impl = std::make_unique<Impl>();
  asio::error_code ec;
  tcp::resolver resolver(impl->io);
  const auto endpoints = resolver.resolve(host, address.substr(colon + 1), tcp::resolver::numeric_service, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("resolving ", address, ": ", ec.message()));
  std::optional<asio::error_code> result;
  asio::async_connect(impl->socket, endpoints, [&](asio::error_code e, const tcp::endpoint&) { result = e; });
  if (auto s = impl->RunUntil(result, deadline); !s.ok()) {
    return absl::DeadlineExceededError(absl::StrCat("connecting to ", address, ": no answer before the deadline"));
  }
  if (*result) return absl::UnavailableError(absl::StrCat("connecting to ", address, ": ", result->message()));
  impl->socket.set_option(tcp::no_delay(true), ec);
  return std::unique_ptr<StreamClient>(new StreamClient(std::move(impl), address));
}

absl::Status StreamClient::Send(const std::vector<ConstBytes>& buffers, Deadline deadline) {
  std::vector<asio::const_buffer> b;
  b.reserve(buffers.size());
  for (const ConstBytes& x : buffers) b.emplace_back(x.data, x.size);
  std::optional<asio::error_code> result;
  asio::async_write(impl_->socket, b, TransferAll, [&](asio::error_code e, size_t) { result = e; });
  if (!impl_->RunUntil(result, deadline).ok()) {
    return absl::DeadlineExceededError(absl::StrCat("sending to ", peer_, ": not sent before the deadline"));
  }
  if (*result) return absl::UnavailableError(absl::StrCat("sending to ", peer_, ": ", result->message()));
  return absl::OkStatus();
}

absl::Status StreamClient::Receive(void* data, size_t n, Deadline deadline) {
  std::optional<asio::error_code> result;
  asio::async_read(impl_->socket, asio::buffer(data, n), TransferAll, [&](asio::error_code e, size_t) { result = e; });
  if (!impl_->RunUntil(result, deadline).ok()) {
    return absl::DeadlineExceededError(absl::StrCat("receiving from ", peer_, ": no whole answer before the deadline"));
  }
  if (*result == asio::error::eof) return absl::UnavailableError(absl::StrCat(peer_, " closed the connection"));
  if (*result) return absl::UnavailableError(absl::StrCat("receiving from ", peer_, ": ", result->message()));
  return absl::OkStatus();
}

absl::StatusOr<size_t> StreamClient::ReceiveSome(void* data, size_t n, Deadline deadline) {
  std::optional<asio::error_code> result;
  size_t got = 0;
  impl_->socket.async_read_some(asio::buffer(data, n), [&](asio::error_code e, size_t k) {
    got = k;
    result = e;
  });
  if (!impl_->RunUntil(result, deadline).ok()) {
    return absl::DeadlineExceededError(absl::StrCat("receiving from ", peer_, ": nothing before the deadline"));
  }
  if (*result == asio::error::eof) return size_t{0};
  if (*result) return absl::UnavailableError(absl::StrCat("receiving from ", peer_, ": ", result->message()));
  return got;
}

void StreamClient::CloseSend() {
  asio::error_code ec;
  impl_->socket.shutdown(tcp::socket::shutdown_send, ec);
}

bool StreamClient::open() const { return impl_->socket.is_open(); }

}  // namespace gantry::net
