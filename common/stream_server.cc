#include "common/stream_server.h"

#include <glog/logging.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gantry::net {

namespace {
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
class Connection;
}  // namespace

// Asio's transfer_all asks for at most 64 KiB a system call.
size_t TransferAll(const std::error_code& ec, size_t) { return ec ? 0 : size_t{1} << 30; }

struct StreamServer::Loop {
  explicit Loop(Options o, Accept a) : options(o), accept(std::move(a)), io(o.threads) {}
  // Declared before io: the connections that io's handlers hold are gone before these are.
  Options options;
  Accept accept;
  std::mutex mu;
  // The open connections, weakly held: a connection leaves the map in its destructor.
  std::map<Connection*, std::weak_ptr<Connection>> conns;  // mu
  std::atomic<size_t> open{0};
  std::atomic<uint64_t> expired{0};
  std::atomic<bool> stopping{false};
  std::atomic<bool> ended{false};  // the loop's threads have returned: nothing more is posted
  bool accepting = false;          // an accept is outstanding (strand)
  asio::io_context io;
  // The acceptor and the server's timers; each connection has a strand of its own.
  asio::strand<asio::io_context::executor_type> strand{io.get_executor()};
  tcp::acceptor acceptor{strand};
  asio::steady_timer grace{strand};    // Stop's grace period
  asio::steady_timer backoff{strand};  // after a failed accept (out of file descriptors)

  void AcceptNext();
  void Closed(Connection* c);
  void BeginStop(std::chrono::milliseconds grace_period);
  // Runs f(connection) on each open connection's strand.
  template <typename F>
  void ForEachConnection(F f);
};

namespace {

class Connection final : public StreamConnection, public std::enable_shared_from_this<Connection> {
 public:
  // socket's executor is the connection's strand: its handlers and its timer's run there.
  Connection(StreamServer::Loop* loop, tcp::socket socket)
      : loop_(loop), socket_(std::move(socket)), timer_(socket_.get_executor()) {
    asio::error_code ec;
    const tcp::endpoint remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("an unknown peer") : absl::StrCat(remote.address().to_string(), ":", remote.port());
    socket_.set_option(tcp::no_delay(true), ec);
  }
  ~Connection() override { loop_->Closed(this); }

  void AwaitMessage(Done done) override {
    if (expired_) return Expired(std::move(done), "waiting for a message");
    if (loop_->stopping) {
      Close();
      done(absl::UnavailableError("the server is stopping"));
      return;
    }
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), done = std::move(done)](asio::error_code ec) {
      if (!ec && self->loop_->stopping) {
        self->Close();
        done(absl::UnavailableError("the server is stopping"));
        return;
      }
      if (ec) {
        done(self->Error(ec, "waiting for a message"));
        return;
      }
      self->in_message_ = true;
      self->deadline_ = Clock::now() + self->loop_->options.message_timeout;
      self->Arm();
      done(absl::OkStatus());
    });
  }

  void Expect(size_t bytes) override {
    const double secs = static_cast<double>(bytes) / loop_->options.min_bytes_per_second;
    deadline_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs));
    Arm();
  }

  void Read(void* data, size_t n, Done done) override {
    if (expired_) return Expired(std::move(done), "reading");
    asio::async_read(socket_, asio::buffer(data, n), TransferAll,
                     [self = shared_from_this(), done = std::move(done)](asio::error_code ec, size_t) {
                       self->Finish(done, ec, "reading");
                     });
  }

  void Write(std::vector<ConstBytes> buffers, Done done) override {
    if (expired_) return Expired(std::move(done), "writing");
    std::vector<asio::const_buffer> b;
    b.reserve(buffers.size());
    for (const ConstBytes& x : buffers) b.emplace_back(x.data, x.size);
    asio::async_write(socket_, b, TransferAll, [self = shared_from_this(), done = std::move(done)](asio::error_code ec, size_t) {
      self->Finish(done, ec, "writing");
    });
  }

  void EndMessage() override {
    in_message_ = false;
    timer_.cancel();
  }

  void Close() override {
    asio::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    timer_.cancel();
  }

  const std::string& peer() const override { return peer_; }
  bool idle() const { return !in_message_; }
  tcp::socket::executor_type executor() { return socket_.get_executor(); }

 private:
  // The deadline timer at deadline_. Past it, with the message still in progress, the
  // outstanding read or write is cancelled and reports DEADLINE_EXCEEDED, as does every
  // operation after it, and the connection closes once the protocol's callback has run
  // (Finish). So the protocol undoes its part of the message (a push's arriving interval)
  // before the peer can see the close: a peer that then retries on another connection finds
  // nothing of the first attempt left, whichever of the loop's threads serves it.
  void Arm() {
    timer_.expires_at(deadline_);
    timer_.async_wait([weak = weak_from_this()](asio::error_code ec) {
      auto self = weak.lock();
      // A wait that had fired before the deadline moved on or the message ended is stale.
      if (ec || !self || !self->in_message_ || self->timer_.expiry() > Clock::now()) return;
      self->expired_ = true;
      self->loop_->expired.fetch_add(1);
      LOG(WARNING) << "data port: " << self->peer_ << " did not complete a message within its deadline; closed";
      asio::error_code ignored;
      self->socket_.cancel(ignored);
    });
  }

  // An operation's end: the protocol's callback, then the close that a passed deadline owes.
  void Finish(const Done& done, asio::error_code ec, const char* what) {
    done(ec ? Error(ec, what) : absl::OkStatus());
    if (expired_) Close();
  }
  // An operation asked for past the deadline: fails at once (on the strand, as a callback).
  void Expired(Done done, const char* what) {
    asio::post(executor(), [self = shared_from_this(), done = std::move(done), what] {
      self->Finish(done, asio::error::timed_out, what);
    });
  }

  absl::Status Error(asio::error_code ec, const char* what) const {
    if (expired_) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "%s: a message not completed within its deadline (%.1f s, and the payload at %.0f MB/s)", peer_,
          std::chrono::duration<double>(loop_->options.message_timeout).count(),
          loop_->options.min_bytes_per_second / 1e6));
    }
    if (ec == asio::error::eof) return absl::UnavailableError(absl::StrCat(peer_, " closed the connection"));
    if (loop_->stopping && ec == asio::error::operation_aborted) {
      return absl::UnavailableError(absl::StrCat(peer_, ": the server is stopping"));
    }
    return absl::UnavailableError(absl::StrCat(peer_, ": ", what, ": ", ec.message()));
  }

  StreamServer::Loop* loop_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::string peer_;
  Clock::time_point deadline_;
  bool in_message_ = false;
  bool expired_ = false;
};

}  // namespace

// On the strand (or before the threads start).
void StreamServer::Loop::AcceptNext() {
  if (stopping || accepting) return;
  {
    std::lock_guard<std::mutex> l(mu);
    if (conns.size() >= options.max_connections) return;  // back-pressure: Closed calls again
  }
  accepting = true;
  acceptor.async_accept(asio::make_strand(io), [this](asio::error_code ec, tcp::socket socket) {
    accepting = false;
    if (stopping) return;  // the socket, if any, closes here
    if (ec) {
      // Out of file descriptors or memory: try again shortly rather than spin.
      LOG(WARNING) << "data port: accept failed: " << ec.message();
      backoff.expires_after(std::chrono::milliseconds(100));
      backoff.async_wait([this](asio::error_code e) {
        if (!e) AcceptNext();
      });
      return;
    }
    auto c = std::make_shared<Connection>(this, std::move(socket));
    {
      std::lock_guard<std::mutex> l(mu);
      conns.emplace(c.get(), c);
      open.store(conns.size());
    }
    asio::post(c->executor(), [this, c]() mutable { accept(std::move(c)); });
    AcceptNext();
  });
}

// Any thread: a connection's destructor.
void StreamServer::Loop::Closed(Connection* c) {
  bool last;
  {
    std::lock_guard<std::mutex> l(mu);
    conns.erase(c);
    open.store(conns.size());
    last = conns.empty();
  }
  if (ended) return;  // the io_context is being destroyed with what it held
  if (stopping) {
    if (last) asio::post(strand, [this] { grace.cancel(); });
    return;
  }
  asio::post(strand, [this] { AcceptNext(); });
}

template <typename F>
void StreamServer::Loop::ForEachConnection(F f) {
  std::vector<std::shared_ptr<Connection>> now;  // released after the lock: a destructor takes it
  {
    std::lock_guard<std::mutex> l(mu);
    for (auto& [p, weak] : conns) {
      if (auto c = weak.lock()) now.push_back(std::move(c));
    }
  }
  for (auto& c : now) asio::post(c->executor(), [c, f] { f(*c); });
}

// On the strand.
void StreamServer::Loop::BeginStop(std::chrono::milliseconds grace_period) {
  stopping = true;
  asio::error_code ec;
  acceptor.close(ec);
  backoff.cancel();
  ForEachConnection([](Connection& c) {
    if (c.idle()) c.Close();  // its waiting callback ends it
  });
  grace.expires_after(grace_period);
  grace.async_wait([this](asio::error_code e) {
    if (e) return;  // every connection ended in time
    ForEachConnection([](Connection& c) { c.Close(); });
  });
  std::lock_guard<std::mutex> l(mu);
  if (conns.empty()) grace.cancel();
}

absl::StatusOr<std::unique_ptr<StreamServer>> StreamServer::Start(const std::string& host, int port, Options options,
                                                                  Accept accept) {
  asio::error_code ec;
  const asio::ip::address addr = asio::ip::make_address(host, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("listen: '", host, "' is not an IP address"));
  if (port < 0 || port > 65535) return absl::InvalidArgumentError(absl::StrCat("listen: port ", port, " is out of range"));
  if (options.max_connections == 0 || options.min_bytes_per_second <= 0 || options.message_timeout.count() <= 0 ||
      options.threads <= 0) {
    return absl::InvalidArgumentError("stream server options: max_connections, min_bytes_per_second, "
                                      "message_timeout and threads must be positive");
  }
  std::unique_ptr<StreamServer> s(new StreamServer());
  s->loop_ = std::make_shared<Loop>(options, std::move(accept));
  tcp::acceptor& a = s->loop_->acceptor;
  const tcp::endpoint ep(addr, static_cast<uint16_t>(port));
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(options.backlog, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("listening on ", host, ":", port, ": ", ec.message()));
  s->port_ = a.local_endpoint().port();
  Loop* loop = s->loop_.get();
  loop->AcceptNext();
  for (int i = 0; i < options.threads; ++i) s->threads_.emplace_back([loop] { loop->io.run(); });
  return s;
}

StreamServer::~StreamServer() { Stop(std::chrono::milliseconds(0)); }

void StreamServer::Stop(std::chrono::milliseconds grace) {
  if (stopped_) return;
  stopped_ = true;
  if (threads_.empty()) return;
  asio::post(loop_->strand, [loop = loop_.get(), grace] { loop->BeginStop(grace); });
  for (std::thread& t : threads_) t.join();
  loop_->ended = true;
}

size_t StreamServer::open_connections() const { return loop_->open.load(); }
uint64_t StreamServer::deadlines_exceeded() const { return loop_->expired.load(); }

}  // namespace gantry::net
