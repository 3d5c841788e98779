#include "comm/gloo/gloo_communicator.h"

#include <gloo/rendezvous/prefix_store.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <glog/logging.h>
#include <signal.h>

#include <cstdlib>

#include <algorithm>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "kernels/cast.h"
#include "comm/gloo/failure_report.h"
#include "comm/gloo/shm_transport.h"

namespace gantry::comm {
void SumFloats(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<float*>(out);
  const auto* x = static_cast<const float*>(a);
  const auto* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void SumBf16(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<uint16_t*>(out);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = kernels::Bf16Of(kernels::FloatOfBf16(x[i]) + kernels::FloatOfBf16(y[i]));
}

namespace {

// Ring reduce-scatter of elements of type T, summed by sum (a Gloo reduce function): in size-1
// steps each rank passes a running partial sum of one block to its right neighbour; the block
// rank r ends with is its own, fully reduced. Each rank moves (size-1)/size of the data, as a
// reduce-scatter should. out is written only after the last read of in, so out may be
// in + r·n (in place). Throws gloo's exceptions.
template <typename T>
void RingReduceScatter(gloo::Context& ctx, int r, int p, uint32_t tag, std::chrono::milliseconds timeout, const T* in,
                       T* out, size_t n, void (*sum)(void*, const void*, const void*, size_t)) {
  const int right = (r + 1) % p, left = (r + p - 1) % p;
  // The ring runs over the blocks' columns a chunk at a time, so that its two working buffers
  // stay small whatever n is (ZeRO 3's embedding unit is tens of millions of elements).
  constexpr size_t kChunk = size_t{1} << 22;
  const size_t room = std::min(n, kChunk);
  std::vector<T> acc(room), incoming(room);
  auto send_buf = ctx.createUnboundBuffer(acc.data(), room * sizeof(T));
  auto recv_buf = ctx.createUnboundBuffer(incoming.data(), room * sizeof(T));
  for (size_t c0 = 0, chunk = 0; c0 < n; c0 += room, ++chunk) {
    const size_t len = std::min(room, n - c0);
    // Step s: send the partial of block (r - s - 1) mod p, receive block (r - s - 2) mod p.
    int block = (r + p - 1) % p;
    const T* col = in + c0;
    std::copy(col + static_cast<size_t>(block) * n, col + static_cast<size_t>(block) * n + len, acc.begin());
    for (int s = 0; s < p - 1; ++s) {
      const uint64_t slot = (static_cast<uint64_t>(tag) << 32) | (static_cast<uint64_t>(chunk) << 16) |
                            static_cast<uint64_t>(s);
      send_buf->send(right, slot, 0, len * sizeof(T));
      recv_buf->recv(left, slot, 0, len * sizeof(T));
      if (!recv_buf->waitRecv(nullptr, timeout)) GLOO_THROW_IO_EXCEPTION("receive timed out");
      if (!send_buf->waitSend(nullptr, timeout)) GLOO_THROW_IO_EXCEPTION("send timed out");
      block = (block + p - 1) % p;
      sum(acc.data(), incoming.data(), col + static_cast<size_t>(block) * n, len);
    }
    std::copy(acc.begin(), acc.begin() + static_cast<std::ptrdiff_t>(len), out + c0);  // block == r now
  }
}

// Gloo's TCP transport writes with writev, which raises SIGPIPE on a socket whose peer has
// gone, and SIGPIPE's default action ends the process: a rank whose peer died (or failed
// first and closed its pairs) would vanish rather than report the collective that failed.
// The process ignores SIGPIPE from its first group on, unless it has a handler of its own;
// the write then fails with EPIPE, and the collective with it. (Seen under ASan: a test's
// process of eight ranks ended by SIGPIPE, with no error printed.)
void IgnoreSigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
      ::signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooCommunicator>> GlooCommunicator::Create(
    int rank, int size, std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " of size ", size, " is not a valid group member"));
  }
  IgnoreSigpipe();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(options.timeout);
    ctx->connectFullMesh(*store, device);
    // Shared-memory links for the point-to-point transfers, before the barrier below: every
    // rank joins them at once, as it joined the mesh.
    // A rank that offers none (GANTRY_SHM_DISABLE=1 is a process's, so it may hold for some
    // ranks of a group and not others) still joins, so that no rank waits for it.
    std::unique_ptr<ShmTransport> shm;
    const char* off = std::getenv("GANTRY_SHM_DISABLE");
    const bool offer = options.shm_offer && !(off != nullptr && std::string(off) == "1");
    if (options.shared_memory && size > 1) {
      std::string note;
      shm = ShmTransport::Join(rank, size, *store, offer ? options.shm_ring_bytes : 0, options.timeout, &note);
      if (!note.empty()) LOG(WARNING) << note;
      // Said in a daemon's log (the worker's: whether its stages linked); not on a command
      // line's or a test's stderr.
      if (shm->links() > 0 && google::IsGoogleLoggingInitialized()) {
        LOG(INFO) << "rank " << rank << " of " << size << ": " << shm->links() << " peer(s) on this host through shared memory";
      }
    }
    // A rank's mesh is up once its own pairs are; a peer's may still be finishing its
    // handshakes. Until every rank is in, none may go on: a rank whose first collectives need
    // no transfer (n 0, one rank's share empty) could otherwise close its pairs under a peer
    // still joining ("connection closed by peer", seen in a full ctest run). Tag 0: the
    // collectives' tags are their sequence numbers, from 1.
    gloo::BarrierOptions joined(ctx);
    joined.setTag(0);
    joined.setTimeout(options.timeout);
    gloo::barrier(joined);
    GlooOptions o = options;
    if (o.failure_grace.count() <= 0) o.failure_grace = DefaultFailureGrace(o.timeout);
    return std::unique_ptr<GlooCommunicator>(new GlooCommunicator(rank, size, std::move(ctx), store, o, std::move(shm)));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("rank ", rank, " of ", size, ": joining the group failed: ", e.what()));
  }
}

GlooCommunicator::GlooCommunicator(int rank, int size, std::shared_ptr<gloo::Context> ctx,
                                   std::shared_ptr<gloo::rendezvous::Store> store, GlooOptions o,
                                   std::unique_ptr<ShmTransport> shm)
    : rank_(rank), size_(size), ctx_(std::move(ctx)), store_(std::move(store)), options_(std::move(o)),
      shm_(std::move(shm)) {}

GlooCommunicator::~GlooCommunicator() = default;

void GlooCommunicator::Abort() {
  aborted_ = true;
  if (shm_ != nullptr) shm_->Wake();
}

int GlooCommunicator::shared_memory_links() const { return shm_ != nullptr ? shm_->links() : 0; }

bool GlooCommunicator::SharedMemoryWith(int peer) const { return shm_ != nullptr && shm_->Linked(peer); }

uint64_t GlooCommunicator::shared_memory_waits() const { return shm_ != nullptr ? shm_->waits() : 0; }

template <typename F>
absl::Status GlooCommunicator::Run(const char* what, F&& f) {
  const uint64_t seq = ++seq_;
  if (!broken_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(what, " #", seq, " on rank ", rank_, ": the group failed earlier: ", broken_));
  }
  if (aborted_) {
    broken_ = absl::StrCat(what, " #", seq, " on rank ", rank_, ": the job's placement was aborted");
    return absl::AbortedError(broken_);
  }
  try {
    f(static_cast<uint32_t>(seq));
  } catch (const std::exception& e) {
    if (aborted_) {
      broken_ = absl::StrCat(what, " #", seq, " failed on rank ", rank_, " of ", size_,
                             " after the job's placement was aborted (gloo: ", e.what(), ")");
      return absl::AbortedError(broken_);
    }
    const std::string missing =
        ReportFailureAndFindMissing(*store_, rank_, size_, seq, options_.failure_grace, &aborted_);
    broken_ = absl::StrCat(what, " #", seq, " failed on rank ", rank_, " of ", size_, ": ", missing, " (timeout ",
                           options_.timeout.count(), " ms; gloo: ", e.what(), ")");
    // Aborted while the other ranks' reports were awaited: the placement's end, as Abort
    // promises (communicator.h), not a timeout.
    if (aborted_) return absl::AbortedError(broken_);
    return absl::DeadlineExceededError(broken_);
  }
  completed_ = seq;
  return absl::OkStatus();
}

template <typename T>
absl::Status GlooCommunicator::AllReduce(T* data, size_t n, void (*sum)(void*, const void*, const void*, size_t)) {
  if (size_ == 1 || n == 0) return Run("all_reduce", [](uint32_t) {});
  return Run("all_reduce", [&](uint32_t tag) {
    gloo::AllreduceOptions o(ctx_);
    o.setOutput(data, n);
    o.setReduceFunction(sum);
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    gloo::allreduce(o);
  });
}

template <typename T>
absl::Status GlooCommunicator::ReduceScatter(const T* in, T* out, size_t n,
                                             void (*sum)(void*, const void*, const void*, size_t)) {
  if (size_ == 1) {
    if (in != out) std::copy(in, in + n, out);
    return Run("reduce_scatter", [](uint32_t) {});
  }
  return Run("reduce_scatter", [&](uint32_t tag) {
    RingReduceScatter(*ctx_, rank_, size_, tag, options_.timeout, in, out, n, sum);
  });
}

absl::Status GlooCommunicator::AllReduceSum(float* data, size_t n) { return AllReduce(data, n, &SumFloats); }

absl::Status GlooCommunicator::ReduceScatterSum(const float* in, float* out, size_t n) {
  return ReduceScatter(in, out, n, &SumFloats);
}

// Gloo has no bf16 type: its algorithms move 2-byte elements and add them with SumBf16. The
// ring all-reduce reduces each segment on one rank and then passes that result on, so every
// rank ends with the same bits.
absl::Status GlooCommunicator::AllReduceSumBf16(uint16_t* data, size_t n) { return AllReduce(data, n, &SumBf16); }

absl::Status GlooCommunicator::ReduceScatterSumBf16(const uint16_t* in, uint16_t* out, size_t n) {
  return ReduceScatter(in, out, n, &SumBf16);
}

absl::Status GlooCommunicator::AllGather(const float* in, float* out, size_t n) {
  std::copy(in, in + n, out + static_cast<size_t>(rank_) * n);
  if (size_ == 1 || n == 0) return Run("all_gather", [](uint32_t) {});
  return Run("all_gather", [&](uint32_t tag) {
    gloo::AllgatherOptions o(ctx_);
    o.setInput(const_cast<float*>(in), n);
    o.setOutput(out, n * static_cast<size_t>(size_));
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    gloo::allgather(o);
  });
}

absl::Status GlooCommunicator::AllToAll(const float* in, float* out, size_t n) {
  if (size_ == 1 || n == 0) {
    return Run("all_to_all", [&](uint32_t) {
      if (in != out) std::copy(in, in + n, out);
    });
  }
  return Run("all_to_all", [&](uint32_t tag) {
    gloo::AlltoallOptions o(ctx_);
    o.setInput(const_cast<float*>(in), n * static_cast<size_t>(size_));
    o.setOutput(out, n * static_cast<size_t>(size_));
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    gloo::alltoall(o);
  });
}

absl::Status GlooCommunicator::AllToAllV(const float* in, const std::vector<size_t>& send_counts, float* out,
                                         const std::vector<size_t>& recv_counts) {
  RETURN_IF_ERROR(CheckAllToAllCounts(rank_, size_, send_counts, recv_counts));
  if (size_ == 1) {
    return Run("all_to_all_v", [&](uint32_t) {
      if (in != out) std::copy(in, in + send_counts[0], out);
    });
  }
  return Run("all_to_all_v", [&](uint32_t tag) {
    gloo::AlltoallvOptions o(ctx_);
    o.setInput(const_cast<float*>(in), std::vector<int64_t>(send_counts.begin(), send_counts.end()));
    o.setOutput(out, std::vector<int64_t>(recv_counts.begin(), recv_counts.end()));
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    gloo::alltoallv(o);
  });
}

absl::Status GlooCommunicator::Broadcast(float* data, size_t n, int root) {
  if (root < 0 || root >= size_) return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root));
  if (size_ == 1 || n == 0) return Run("broadcast", [](uint32_t) {});
  return Run("broadcast", [&](uint32_t tag) {
    gloo::BroadcastOptions o(ctx_);
    o.setOutput(data, n);
    o.setRoot(root);
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    gloo::broadcast(o);
  });
}

// Send, Recv and SendRecv use one slot per sender (a peer's Send or Recv matches either side
// of a SendRecv, in order); over shared memory the link's ring keeps that order.
void GlooCommunicator::Transfer(const float* send, size_t send_n, int to, float* recv, size_t recv_n,
                                int from) {
  const bool shm_out = to >= 0 && SharedMemoryWith(to), shm_in = from >= 0 && SharedMemoryWith(from);
  std::unique_ptr<gloo::transport::UnboundBuffer> out, in;
  if (to >= 0 && !shm_out) {
    out = ctx_->createUnboundBuffer(const_cast<float*>(send), send_n * sizeof(float));
    out->send(to, /*slot=*/(uint64_t{1} << 40) | static_cast<uint64_t>(rank_));
  }
  if (from >= 0 && !shm_in) {
    in = ctx_->createUnboundBuffer(recv, recv_n * sizeof(float));
    in->recv(from, /*slot=*/(uint64_t{1} << 40) | static_cast<uint64_t>(from));
  }
  // The shared-memory sides while TCP's (posted above) move on Gloo's threads.
  if (shm_out || shm_in) {
    shm_->Transfer(send, shm_out ? send_n * sizeof(float) : 0, shm_out ? to : -1, recv,
                   shm_in ? recv_n * sizeof(float) : 0, shm_in ? from : -1, options_.timeout, aborted_);
  }
  if (in != nullptr && !in->waitRecv(nullptr, options_.timeout)) GLOO_THROW_IO_EXCEPTION("receive timed out");
  if (out != nullptr && !out->waitSend(nullptr, options_.timeout)) GLOO_THROW_IO_EXCEPTION("send timed out");
}

absl::Status GlooCommunicator::Send(const float* data, size_t n, int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) return absl::InvalidArgumentError(absl::StrCat("send to rank ", peer));
  return Run("send", [&](uint32_t) { Transfer(data, n, peer, nullptr, 0, -1); });
}

absl::Status GlooCommunicator::Recv(float* data, size_t n, int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) return absl::InvalidArgumentError(absl::StrCat("recv from rank ", peer));
  return Run("recv", [&](uint32_t) { Transfer(nullptr, 0, -1, data, n, peer); });
}

absl::Status GlooCommunicator::SendRecv(const float* send, size_t send_n, int to, float* recv, size_t recv_n,
                                        int from) {
  RETURN_IF_ERROR(CheckSendRecvPeers(rank_, size_, to, from));
  return Run("send_recv", [&](uint32_t) { Transfer(send, send_n, to, recv, recv_n, from); });
}

absl::Status GlooCommunicator::Barrier() {
  if (size_ == 1) return Run("barrier", [](uint32_t) {});
  return Run("barrier", [&](uint32_t tag) {
    gloo::BarrierOptions o(ctx_);
    o.setTag(tag);
    o.setTimeout(options_.timeout);
    gloo::barrier(o);
  });
}

namespace {
// A PrefixStore that keeps its base store alive.
class OwningPrefixStore final : public gloo::rendezvous::PrefixStore {
 public:
  OwningPrefixStore(const std::string& prefix, std::shared_ptr<gloo::rendezvous::Store> base)
      : PrefixStore(prefix, *base), base_(std::move(base)) {}

 private:
  std::shared_ptr<gloo::rendezvous::Store> base_;
};
}  // namespace

GroupFactory StoreGroups(std::shared_ptr<gloo::rendezvous::Store> store, MemberFactory create,
                         std::vector<Communicator*>* made) {
  return [store, create = std::move(create), made](const std::string& name, const std::vector<int>& members,
                                                   int index) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    auto c = create(index, static_cast<int>(members.size()), std::make_shared<OwningPrefixStore>(name, store));
    if (!c.ok()) return absl::Status(c.status().code(), absl::StrCat("group ", name, ": ", c.status().message()));
    if (made != nullptr) made->push_back(c->get());
    return std::move(*c);
  };
}

GroupFactory GlooGroups(std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options,
                        std::vector<Communicator*>* made) {
  GlooOptions p2p = options;
  p2p.shared_memory = true;
  GroupFactory plain = StoreGroupsOf<GlooCommunicator>(store, options, made);
  GroupFactory linked = StoreGroupsOf<GlooCommunicator>(store, p2p, made);
  return [plain, linked](const std::string& name, const std::vector<int>& members, int index) {
    return PointToPointGroup(name) ? linked(name, members, index) : plain(name, members, index);
  };
}

}  // namespace gantry::comm
