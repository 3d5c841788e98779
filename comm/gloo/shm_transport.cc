#include "comm/gloo/shm_transport.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <gloo/rendezvous/store.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gantry::comm {
namespace {

constexpr uint64_t kSegmentMagic = 0x67616e7472797368;  // "gantrysh"
constexpr uint64_t kMessageMark = 0x6d73670067616e74;   // every message's header begins with it
constexpr size_t kHeaderBytes = 16;                     // a message's header: the mark, the byte count

// The segment's first bytes. Doorbell and sleepers are shared between processes: futexes
// without FUTEX_PRIVATE_FLAG, std::atomic of a lock-free size.
struct SegmentHeader {
  uint64_t magic;
  uint64_t cookie;
  alignas(64) std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> sleepers;
};
// One ring's positions, each on a cache line of its own: `written` advanced by the writing
// peer, `read` by the owner; both count bytes since the start, so written - read is what the
// ring holds.
struct RingState {
  alignas(64) std::atomic<uint64_t> written;
  alignas(64) std::atomic<uint64_t> read;
  // Set by the reader when it refuses a message (another size than it expected): the byte
  // count it expected, plus one. The writer, woken, stops with an error naming it rather than
  // wait for room that will not come.
  std::atomic<uint64_t> refused;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the rings' positions are shared between processes");

constexpr size_t kRingStates = 256;  // offset of the first RingState
size_t DataOffset(int rings) {
  const size_t end = kRingStates + sizeof(RingState) * static_cast<size_t>(rings);
  return (end + 4095) / 4096 * 4096;
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* timeout) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, timeout, nullptr, 0);
}

// What this process sees as its host's shared memory: the boot and /dev/shm's mount. Ranks
// with the same identity can open each other's segments (the cookie still checks it).
std::string Identity() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(f, boot);
  struct stat st {};
  if (boot.empty() || ::stat("/dev/shm", &st) != 0) return "";
  return absl::StrCat(boot, "/", st.st_dev, ":", st.st_ino);
}

std::vector<char> ToBytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string String(const std::vector<char>& v) { return {v.begin(), v.end()}; }

}  // namespace

// A mapped segment: this rank's own (created) or a peer's (opened).
struct ShmTransport::Segment {
  std::string name;
  bool owner = false;
  bool unlinked = false;
  void* base = nullptr;
  size_t bytes = 0;
  int rings = 0;  // one per peer on the owner's host

  ~Segment() {
    if (base != nullptr) ::munmap(base, bytes);
    Unlink();
  }
  void Unlink() {
    if (owner && !unlinked) ::shm_unlink(name.c_str());
    unlinked = true;
  }
  SegmentHeader& header() const { return *static_cast<SegmentHeader*>(base); }
  RingState& ring(int k) const {
    return reinterpret_cast<RingState*>(static_cast<char*>(base) + kRingStates)[k];
  }
  char* data(int k, size_t ring_bytes) const {
    return static_cast<char*>(base) + DataOffset(rings) + static_cast<size_t>(k) * ring_bytes;
  }
  // Bumps the doorbell, waking the owner where it sleeps on it.
  void Ring() const {
    header().doorbell.fetch_add(1, std::memory_order_seq_cst);
    if (header().sleepers.load(std::memory_order_seq_cst) > 0) Futex(&header().doorbell, FUTEX_WAKE, INT_MAX, nullptr);
  }

  // Maps the `bytes` of the segment open as fd, and closes fd; false (errno set) on failure.
  bool Map(int fd, size_t n) {
    void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    errno = err;
    if (p == MAP_FAILED) return false;
    base = p;
    bytes = n;
    return true;
  }

  // A segment's bytes: its header and ring states, then `rings` rings of ring_bytes.
  static size_t Bytes(int rings, size_t ring_bytes) {
    return DataOffset(rings) + static_cast<size_t>(rings) * ring_bytes;
  }

  // Creates and maps a segment of `rings` rings, its memory reserved (posix_fallocate: a full
  // /dev/shm is an error here, not a SIGBUS at the first write). Null on failure, *why set.
  static std::unique_ptr<Segment> Create(int rings, size_t ring_bytes, uint64_t cookie, std::string* why) {
    const size_t bytes = Bytes(rings, ring_bytes);
    auto s = std::make_unique<Segment>();
    s->rings = rings;
    s->name = absl::StrCat("/gantry-p2p-", ::getpid(), "-", absl::Hex(cookie, absl::kZeroPad16));
    const int fd = ::shm_open(s->name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
      *why = absl::StrCat("shm_open(", s->name, "): ", std::strerror(errno));
      return nullptr;
    }
    s->owner = true;
    const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (err != 0) {
      *why = absl::StrCat("reserving ", bytes, " bytes in /dev/shm: ", std::strerror(err));
      ::close(fd);
      return nullptr;
    }
    if (!s->Map(fd, bytes)) {
      *why = absl::StrCat("mmap of ", bytes, " bytes: ", std::strerror(errno));
      return nullptr;
    }
    // New tmpfs pages are zero: every ring empty, the doorbell at 0. The cookie and the magic
    // last, so that a peer that sees them sees a segment ready.
    s->header().cookie = cookie;
    std::atomic_thread_fence(std::memory_order_release);
    s->header().magic = kSegmentMagic;
    return s;
  }
  // Opens and maps a peer's segment of `rings` rings, which must hold `cookie`; null otherwise.
  static std::unique_ptr<Segment> Open(const std::string& name, int rings, size_t ring_bytes, uint64_t cookie) {
    const size_t bytes = Bytes(rings, ring_bytes);
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) return nullptr;
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
      ::close(fd);
      return nullptr;
    }
    auto s = std::make_unique<Segment>();
    s->name = name;
    s->rings = rings;
    if (!s->Map(fd, bytes)) return nullptr;
    if (s->header().magic != kSegmentMagic || s->header().cookie != cookie) return nullptr;
    return s;
  }
};

std::unique_ptr<ShmTransport> ShmTransport::Join(int rank, int size, gloo::rendezvous::Store& store,
                                                 size_t ring_bytes, std::chrono::milliseconds timeout,
                                                 std::string* note) {
  std::unique_ptr<ShmTransport> t(new ShmTransport(rank, size));
  t->ring_bytes_ = ring_bytes;
  t->peers_.resize(static_cast<size_t>(size));
  t->out_ring_.assign(static_cast<size_t>(size), -1);
  t->in_ring_.assign(static_cast<size_t>(size), -1);
  auto get = [&](const std::string& key) {
    store.wait({key}, timeout);
    return String(store.get(key));
  };
  auto all = [&](const std::string& what, const std::vector<int>& ranks) {
    std::vector<std::string> got(static_cast<size_t>(size));
    for (int r : ranks) got[static_cast<size_t>(r)] = r == rank ? "" : get(absl::StrCat("shm/", what, "/", r));
    return got;
  };

  // 1. Who shares this rank's host: every rank's identity.
  std::string me = Identity();
  if (me.empty()) me = absl::StrCat("none ", rank);
  store.set(absl::StrCat("shm/id/", rank), ToBytes(me));
  std::vector<int> everyone(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) everyone[static_cast<size_t>(r)] = r;
  std::vector<std::string> id = all("id", everyone);
  id[static_cast<size_t>(rank)] = me;
  // The peers on each rank's host, in rank order: ring k of rank q's segment is local[q][k]'s.
  std::vector<std::vector<int>> local(static_cast<size_t>(size));
  for (int q = 0; q < size; ++q) {
    for (int r = 0; r < size; ++r) {
      if (r != q && id[static_cast<size_t>(r)] == id[static_cast<size_t>(q)]) local[static_cast<size_t>(q)].push_back(r);
    }
  }
  auto rings_of = [&](int q) { return static_cast<int>(local[static_cast<size_t>(q)].size()); };
  // A rank that offers no link still publishes its segment ("none") and its mapped list, so
  // its peers never wait for it.
  const bool offering = ring_bytes >= kMinRingBytes;
  const std::vector<int>& mine = local[static_cast<size_t>(rank)];
  auto index_in = [](const std::vector<int>& l, int r) {
    return static_cast<int>(std::find(l.begin(), l.end(), r) - l.begin());
  };

  // 2. This rank's segment, published by name and cookie ("none" where it has no local peer
  // or could not have one).
  std::string published = "none";
  if (!mine.empty() && offering) {
    std::random_device rd;
    const uint64_t cookie = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
    std::string why;
    t->own_ = Segment::Create(rings_of(rank), ring_bytes, cookie, &why);
    if (t->own_ == nullptr) {
      *note = absl::StrCat("rank ", rank, " keeps TCP for its ", mine.size(), " peers on this host: ", why);
    } else {
      published = absl::StrCat(t->own_->name, " ", cookie);
    }
  }
  store.set(absl::StrCat("shm/seg/", rank), ToBytes(published));

  // 3. Each local peer's segment mapped; which were, published as one character per rank.
  std::string mapped(static_cast<size_t>(size), '0');
  if (t->own_ != nullptr) {
    const std::vector<std::string> seg = all("seg", mine);
    for (int q : mine) {
      const std::vector<std::string> parts = absl::StrSplit(seg[static_cast<size_t>(q)], ' ');
      uint64_t cookie = 0;
      if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &cookie)) continue;
      auto s = Segment::Open(parts[0], rings_of(q), ring_bytes, cookie);
      if (s == nullptr) continue;
      t->peers_[static_cast<size_t>(q)] = std::move(s);
      mapped[static_cast<size_t>(q)] = '1';
    }
  }
  store.set(absl::StrCat("shm/mapped/", rank), ToBytes(mapped));

  // 4. A link where both mapped each other's. Every peer that will ever open this rank's
  // segment has done so once it published: the name can go.
  const std::vector<std::string> theirs = all("mapped", mine);
  for (int q : mine) {
    const std::string& m = theirs[static_cast<size_t>(q)];
    const bool both = mapped[static_cast<size_t>(q)] == '1' && m.size() == static_cast<size_t>(size) &&
                      m[static_cast<size_t>(rank)] == '1';
    if (!both) {
      t->peers_[static_cast<size_t>(q)].reset();
      continue;
    }
    t->out_ring_[static_cast<size_t>(q)] = index_in(local[static_cast<size_t>(q)], rank);
    t->in_ring_[static_cast<size_t>(q)] = index_in(mine, q);
  }
  if (t->own_ != nullptr) t->own_->Unlink();
  return t;
}

ShmTransport::ShmTransport(int rank, int size) : rank_(rank), size_(size) {}

ShmTransport::~ShmTransport() = default;

bool ShmTransport::Linked(int peer) const {
  return peer >= 0 && peer < size_ && peers_[static_cast<size_t>(peer)] != nullptr;
}

int ShmTransport::links() const {
  return static_cast<int>(std::count_if(peers_.begin(), peers_.end(), [](const auto& p) { return p != nullptr; }));
}

void ShmTransport::Wake() {
  if (own_ != nullptr) own_->Ring();
}

void ShmTransport::Transfer(const void* send, size_t send_bytes, int to, void* recv, size_t recv_bytes, int from,
                            std::chrono::milliseconds timeout, const std::atomic<bool>& aborted) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const size_t cap = ring_bytes_;
  // The message out: header then bytes, `sent` of them written so far.
  const uint64_t out_header[2] = {kMessageMark, send_bytes};
  const size_t out_total = to >= 0 ? kHeaderBytes + send_bytes : 0;
  size_t sent = 0;
  // The message in: its header is read first and checked.
  uint64_t in_header[2] = {0, 0};
  const size_t in_total = from >= 0 ? kHeaderBytes + recv_bytes : 0;
  size_t got = 0;

  // Stream offset `at` of a message (header, then payload) as a contiguous piece of at most
  // `len` bytes: its address and length.
  auto piece = [](auto* header, auto* payload, size_t at, size_t len) {
    using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<decltype(payload)>>, const char, char>;
    if (at < kHeaderBytes) return std::pair<Byte*, size_t>(reinterpret_cast<Byte*>(header) + at, std::min(len, kHeaderBytes - at));
    return std::pair<Byte*, size_t>(static_cast<Byte*>(payload) + (at - kHeaderBytes), len);
  };

  Segment* peer_out = to >= 0 ? peers_[static_cast<size_t>(to)].get() : nullptr;
  Segment* peer_in = from >= 0 ? peers_[static_cast<size_t>(from)].get() : nullptr;
  if ((to >= 0 && peer_out == nullptr) || (from >= 0 && peer_in == nullptr)) {
    throw std::runtime_error(absl::StrCat("rank ", rank_, " has no shared-memory link to rank ",
                                          to >= 0 && peer_out == nullptr ? to : from));
  }
  SegmentHeader& bell = own_->header();

  while (sent < out_total || got < in_total) {
    const uint32_t seen = bell.doorbell.load(std::memory_order_seq_cst);
    if (aborted.load()) throw std::runtime_error("aborted while waiting on a shared-memory link");
    bool progress = false;
    if (sent < out_total) {
      const int k = out_ring_[static_cast<size_t>(to)];
      RingState& ring = peer_out->ring(k);
      if (const uint64_t expected = ring.refused.load(std::memory_order_acquire); expected != 0) {
        throw std::runtime_error(absl::StrCat("rank ", to, " refused the ", send_bytes, " bytes rank ", rank_,
                                              " sent: it expected ", expected - 1));
      }
      const uint64_t w = ring.written.load(std::memory_order_relaxed);
      const uint64_t r = ring.read.load(std::memory_order_acquire);
      const size_t room = cap - static_cast<size_t>(w - r);
      const size_t n = std::min(room, out_total - sent);
      if (n > 0) {
        char* data = peer_out->data(k, cap);
        for (size_t done = 0; done < n;) {
          auto [src, avail] = piece(out_header, send, sent + done, n - done);
          const size_t pos = static_cast<size_t>((w + done) % cap);
          const size_t len = std::min(avail, cap - pos);
          std::memcpy(data + pos, src, len);
          done += len;
        }
        ring.written.store(w + n, std::memory_order_release);
        peer_out->Ring();
        sent += n;
        progress = true;
      }
    }
    if (got < in_total) {
      const int k = in_ring_[static_cast<size_t>(from)];
      RingState& ring = own_->ring(k);
      const uint64_t w = ring.written.load(std::memory_order_acquire);
      const uint64_t r = ring.read.load(std::memory_order_relaxed);
      // The header first, alone, so that a message of another size is refused before its
      // bytes land in recv.
      size_t n = std::min(static_cast<size_t>(w - r), in_total - got);
      if (got < kHeaderBytes) n = std::min(n, kHeaderBytes - got);
      if (n > 0) {
        const char* data = own_->data(k, cap);
        for (size_t done = 0; done < n;) {
          auto [dst, avail] = piece(in_header, recv, got + done, n - done);
          const size_t pos = static_cast<size_t>((r + done) % cap);
          const size_t len = std::min(avail, cap - pos);
          std::memcpy(dst, data + pos, len);
          done += len;
        }
        ring.read.store(r + n, std::memory_order_release);
        peer_in->Ring();
        got += n;
        progress = true;
        if (got == kHeaderBytes && (in_header[0] != kMessageMark || in_header[1] != recv_bytes)) {
          ring.refused.store(recv_bytes + 1, std::memory_order_release);
          peer_in->Ring();
          throw std::runtime_error(
              in_header[0] != kMessageMark
                  ? absl::StrCat("the shared-memory ring from rank ", from, " to rank ", rank_, " is out of step")
                  : absl::StrCat("rank ", from, " sent ", in_header[1], " bytes where rank ", rank_, " expected ",
                                 recv_bytes));
        }
      }
    }
    if (progress) continue;
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) {
      throw std::runtime_error(absl::StrCat(
          got < in_total ? absl::StrCat("receive from rank ", from) : absl::StrCat("send to rank ", to),
          " over shared memory timed out (", got < in_total ? got : sent, " of ", got < in_total ? in_total : out_total,
          " bytes)"));
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
    const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
    waits_.fetch_add(1);
    if (bell.doorbell.load(std::memory_order_seq_cst) == seen) Futex(&bell.doorbell, FUTEX_WAIT, seen, &ts);
    bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace gantry::comm
