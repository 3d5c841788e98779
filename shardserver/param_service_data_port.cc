// The ParamServer's data port (common/param_wire.h's protocol) over a StreamServer: each
// connection's requests, one after another, as callbacks on the server's event loop.
//
// A push's payload is received straight into the range's gradient, outside the range's lock:
// the push's interval is registered as arriving first, so that no other push may overlap it
// and no AdamW step reads it meanwhile (Range::arriving). A read is written straight from the
// range, outside the lock, all but its last chunk, which is copied out under the lock after a
// check that the values did not change meanwhile (Send). A write's payload moves in chunks
// through the connection's staging buffer (kChunkBytes): read from the socket, then copied
// into the range under its lock; a refused payload is read and dropped the same way. So a
// client that stalls half-way holds no lock, and a connection holds at most one chunk whatever
// the request's size.
#include <glog/logging.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/authz.h"
#include "common/param_wire.h"
#include "common/status.h"
#include "shardserver/param_service.h"

namespace gantry::shardserver {

namespace {
constexpr size_t kChunkBytes = 1 << 20;  // pulls faster than 256 KiB chunks (docs/perf/cluster.md)
using Clock = std::chrono::steady_clock;
using net::ParamWireHeader;
}  // namespace

class ParamService::DataSession : public std::enable_shared_from_this<DataSession> {
 public:
  DataSession(ParamService* service, std::shared_ptr<net::StreamConnection> conn)
      : service_(service), conn_(std::move(conn)) {}
  ~DataSession() {
    if (range_) {
      std::lock_guard<std::mutex> l(range_->mu);
      EndArrivingLocked();
    }
  }

  // Waits for the next request.
  void Next() {
    conn_->AwaitMessage([self = shared_from_this()](absl::Status s) {
      if (!s.ok()) return self->conn_->Close();  // closed between requests, or stopping: no request lost
      self->t0_ = Clock::now();
      self->conn_->Read(&self->h_, sizeof(self->h_), [self](absl::Status st) { self->OnHeader(st); });
    });
  }

 private:
  bool inbound() const { return h_.op == ParamWireHeader::kPush || h_.op == ParamWireHeader::kWrite; }
  const char* method() const {
    switch (h_.op) {
      case ParamWireHeader::kPush: return "DataPush";
      case ParamWireHeader::kRead: return "DataRead";
      case ParamWireHeader::kWrite: return "DataWrite";
      default: return "DataInvalid";
    }
  }

  void OnHeader(absl::Status s) {
    if (!s.ok()) return conn_->Close();  // no whole header: not a request (logged if its deadline passed)
    // A header that cannot be a request: answered with the reason, then the connection is
    // closed (what follows it cannot be framed).
    if (h_.magic != ParamWireHeader::kMagic) {
      return Reply(absl::InvalidArgumentError(absl::StrFormat("not a data port request: magic 0x%08x, not 0x%08x",
                                                              h_.magic, ParamWireHeader::kMagic)),
                   /*close=*/true);
    }
    if (h_.job_len > ParamWireHeader::kMaxJobLen || h_.count < 0 || h_.count > ParamWireHeader::kMaxCount) {
      return Reply(absl::InvalidArgumentError(absl::StrCat("a request with a job id of ", h_.job_len, " bytes (at most ",
                                                           ParamWireHeader::kMaxJobLen, ") and ", h_.count,
                                                           " values (0 to 2^32)")),
                   /*close=*/true);
    }
    job_.assign(h_.job_len, '\0');
    conn_->Read(job_.data(), job_.size(), [self = shared_from_this()](absl::Status st) {
      if (!st.ok()) return self->Broken(st);
      self->Serve();
    });
  }

  // The request is framed: checks it against the range, then moves its payload.
  void Serve() {
    const size_t n = static_cast<size_t>(h_.count);
    bytes_ = n * sizeof(float);
    reply_ = {};
    conn_->Expect(bytes_);
    const absl::Status s = [&]() -> absl::Status {
      if (h_.op != ParamWireHeader::kPush && h_.op != ParamWireHeader::kRead && h_.op != ParamWireHeader::kWrite) {
        return absl::InvalidArgumentError(absl::StrCat("unknown operation ", h_.op, " (1 push, 2 read, 3 write)"));
      }
      if (h_.op != ParamWireHeader::kPush && h_.buffer > v1::ADAM_V) {
        return absl::InvalidArgumentError(absl::StrCat("unknown buffer ", h_.buffer, " (0 params, 1 m, 2 v)"));
      }
      RETURN_IF_ERROR(Authorize(service_->data_callers_, Action::kParamServer, AuthzObject::Job(job_, "", "")));
      ASSIGN_OR_RETURN(range_, service_->Find(job_, h_.generation));
      RETURN_IF_ERROR(CheckWithin(*range_, "payload", h_.offset, n));
      at_ = static_cast<size_t>(h_.offset) - range_->begin;
      std::lock_guard<std::mutex> l(range_->mu);
      reply_.version = range_->step;
      changes_ = range_->changes;
      if (h_.op == ParamWireHeader::kPush) {
        RETURN_IF_ERROR(CheckPushStepLocked(*range_, job_, h_.step));
        RETURN_IF_ERROR(CheckNotArrivingLocked(*range_, at_, n));
        range_->arriving.emplace_back(at_, at_ + n);
        arriving_ = true;
      }
      return absl::OkStatus();
    }();
    if (!s.ok()) {
      range_.reset();
      if (!op_known()) return Reply(s, /*close=*/true);  // its payload's length is unknown
      if (inbound()) {  // the refused payload is read and dropped, and the connection goes on
        refused_ = s;
        return Receive(0);
      }
      return Reply(s);
    }
    refused_ = absl::OkStatus();
    if (h_.op == ParamWireHeader::kPush) {
      return conn_->Read(range_->grad.data() + at_, bytes_, [self = shared_from_this()](absl::Status st) {
        if (!st.ok()) return self->Broken(st);
        self->FinishInbound();
      });
    }
    if (inbound()) return Receive(0);
    Send();
  }

  // The push's interval is no longer arriving (range_->mu held).
  void EndArrivingLocked() {
    if (!arriving_) return;
    arriving_ = false;
    auto& a = range_->arriving;
    a.erase(std::find(a.begin(), a.end(), std::make_pair(at_, at_ + static_cast<size_t>(h_.count))));
  }
  bool op_known() const {
    return h_.op == ParamWireHeader::kPush || h_.op == ParamWireHeader::kRead || h_.op == ParamWireHeader::kWrite;
  }

  // Whether the range still takes this request's payload (r->mu held).
  absl::Status StillCurrentLocked() const {
    if (range_->retired) {
      return absl::FailedPreconditionError(absl::StrCat("the range of ", job_, " at generation ", h_.generation,
                                                        " was replaced while the request was served"));
    }
    if (h_.op == ParamWireHeader::kPush && h_.step != range_->step + 1) {
      return absl::FailedPreconditionError(absl::StrCat("step ", h_.step, " of ", job_,
                                                        " was applied while this push's payload arrived"));
    }
    return absl::OkStatus();
  }

  // Write, and a refused push or write: the payload from byte `done` on, a chunk at a time.
  void Receive(size_t done) {
    if (done == bytes_) return FinishInbound();
    const size_t k = std::min(kChunkBytes, bytes_ - done);
    staging_.resize(std::min(kChunkBytes, bytes_));
    conn_->Read(staging_.data(), k, [self = shared_from_this(), done, k](absl::Status s) {
      if (!s.ok()) return self->Broken(s);
      if (self->refused_.ok()) {
        Range* r = self->range_.get();
        std::lock_guard<std::mutex> l(r->mu);
        self->refused_ = self->StillCurrentLocked();
        if (self->refused_.ok()) {
          float* dst = r->Buffer(static_cast<v1::RangeBuffer>(self->h_.buffer))->data();
          std::memcpy(reinterpret_cast<char*>(dst + self->at_) + done, self->staging_.data(), k);
          ++r->changes;
        }
      }
      self->Receive(done + k);
    });
  }

  void FinishInbound() {
    absl::Status s = refused_;
    if (s.ok()) {
      Range* r = range_.get();
      std::lock_guard<std::mutex> l(r->mu);
      EndArrivingLocked();
      s = StillCurrentLocked();
      if (s.ok() && h_.op == ParamWireHeader::kPush) {
        bool applied = false;
        s = service_->CompletePushLocked(r, h_.step, h_.lr, static_cast<size_t>(h_.count), &applied);
      }
      reply_.version = r->step;
    }
    range_.reset();
    Reply(s);
  }

  // Read: the reply's header and the payload. All but its last chunk is written straight from
  // the range (no copy on the loop's thread), then the last chunk is copied out under the
  // range's lock and written. Values that change under a read (a write or an AdamW step
  // meanwhile, which a client reading between its steps never meets) are not sent mixed: that
  // copy sees the change and the connection closes before the reply is whole. A change that
  // comes after it changed nothing already sent: a write completes once the kernel holds its
  // bytes.
  void Send() {
    const size_t last = std::min(kChunkBytes, bytes_), head = bytes_ - last;
    Range* r = range_.get();
    if (!Unchanged()) return Changed();
    const char* src = reinterpret_cast<const char*>(r->Buffer(static_cast<v1::RangeBuffer>(h_.buffer))->data() + at_);
    std::vector<net::ConstBytes> out{{&reply_, sizeof(reply_)}};
    if (head > 0) out.push_back({src, head});
    conn_->Write(std::move(out), [self = shared_from_this(), src, head, last](absl::Status s) {
      if (!s.ok()) return self->Broken(s);
      self->staging_.resize(std::max<size_t>(last, 1));
      if (!self->Unchanged([&] { std::memcpy(self->staging_.data(), src + head, last); })) return self->Changed();
      self->conn_->Write({{self->staging_.data(), last}}, [self](absl::Status st) {
        if (!st.ok()) return self->Broken(st);
        self->range_.reset();
        self->Record(absl::OkStatus());
        self->conn_->EndMessage();
        self->Next();
      });
    });
  }

  // Whether the values being read are those the read began with; if so, runs then(), under
  // the range's lock.
  template <typename Then = void (*)()>
  bool Unchanged(Then then = [] {}) {
    std::lock_guard<std::mutex> l(range_->mu);
    if (range_->changes != changes_ || range_->retired) return false;
    then();
    return true;
  }
  void Changed() {
    LOG(WARNING) << "data port: the values of " << job_ << " changed while " << conn_->peer()
                 << " read them; connection closed";
    Broken(absl::AbortedError("the values changed during the read"));
  }

  // Answers with s (and its message); then the next request, or the connection closes.
  void Reply(const absl::Status& s, bool close = false) {
    Record(s);
    reply_.code = static_cast<int32_t>(s.code());
    message_ = std::string(s.message());
    reply_.message_len = static_cast<uint32_t>(message_.size());
    conn_->Write({{&reply_, sizeof(reply_)}, {message_.data(), message_.size()}},
                 [self = shared_from_this(), close](absl::Status st) {
                   if (!st.ok() || close) return self->conn_->Close();
                   self->conn_->EndMessage();
                   self->Next();
                 });
  }

  // The connection broke, stalled past its deadline, or the server stopped mid-request.
  void Broken(const absl::Status& s) {
    Record(s);
    if (range_) {
      std::lock_guard<std::mutex> l(range_->mu);
      EndArrivingLocked();  // what arrived of the push is dropped: it was not counted
    }
    range_.reset();
    conn_->Close();
  }

  void Record(const absl::Status& s) {
    metrics::RecordRpc(*service_->registry_, "shardserver", method(), absl::StatusCodeToString(s.code()),
                       std::chrono::duration<double>(Clock::now() - t0_).count());
  }

  ParamService* service_;
  std::shared_ptr<net::StreamConnection> conn_;
  ParamWireHeader h_;
  std::string job_;
  std::shared_ptr<Range> range_;  // held while the request runs
  bool arriving_ = false;         // this push's interval is in range_->arriving
  size_t at_ = 0, bytes_ = 0;     // the payload's local index and size
  uint64_t changes_ = 0;          // the range's changes when a read began
  absl::Status refused_;          // an inbound payload to drop, and why
  std::vector<char> staging_;
  net::ParamWireReply reply_;
  std::string message_;
  Clock::time_point t0_;
};

absl::StatusOr<std::string> ParamService::StartDataPort(const std::string& host, net::StreamServer::Options options,
                                                        Principal callers) {
  if (data_port_) return absl::FailedPreconditionError("the data port is already started");
  data_callers_ = std::move(callers);
  ASSIGN_OR_RETURN(data_port_, net::StreamServer::Start(host, 0, options, [this](std::shared_ptr<net::StreamConnection> c) {
                     std::make_shared<DataSession>(this, std::move(c))->Next();
                   }));
  return absl::StrCat(host, ":", data_port_->port());
}

void ParamService::StopDataPort(std::chrono::milliseconds grace) {
  if (data_port_) data_port_->Stop(grace);
}

}  // namespace gantry::shardserver
