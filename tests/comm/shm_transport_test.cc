// The Gloo communicator's shared-memory links (comm/gloo/shm_transport.h): point-to-point
// transfers between ranks on one host, through each rank's ring in shared memory. Ranks are
// threads of this process meeting through an in-memory store, and once two processes (a fork,
// made before this process has any other thread) meeting through a file store.
#include "comm/gloo/shm_transport.h"

#include <dirent.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/groups.h"
#include "tests/comm/gloo_ranks.h"
#include "tests/test_util.h"

namespace gantry::comm {
namespace {

GlooOptions Linked(size_t ring_bytes, std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  GlooOptions o;
  o.shared_memory = true;
  o.shm_ring_bytes = ring_bytes;
  o.timeout = timeout;
  return o;
}

float Value(int rank, size_t i, int round) {
  return static_cast<float>(rank * 1000 + round) + static_cast<float>(i % 4099) * 0.5f;
}

absl::Status Expect(const std::vector<float>& got, int from, int round, const char* what) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != Value(from, i, round)) {
      return absl::InternalError(absl::StrCat(what, " from rank ", from, " round ", round, ": element ", i, " is ",
                                              got[i], " not ", Value(from, i, round)));
    }
  }
  return absl::OkStatus();
}

// No segment is left in /dev/shm by a group once it is made: each name is unlinked as soon as
// every peer has mapped it.
std::vector<std::string> SegmentsOf(pid_t pid) {
  std::vector<std::string> names;
  const std::string prefix = absl::StrCat("gantry-p2p-", pid, "-");
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      if (absl::StartsWith(e->d_name, prefix)) names.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  return names;
}

// Every rank linked to every other; a ring of SendRecv steps (to rank + 1, from rank - 1),
// Send/Recv pairs and steps of nothing carry exactly what TCP would. The ring is 5,000 bytes
// (not a power of two): messages of 0, 1, 1,001 and 300,000 floats stream through it in
// pieces, wrapping, and at p 2 both ranks exchange messages 240 times their rings at once.
TEST(GlooSharedMemoryTest, LinkedRanksCarryMessagesOfAnySizeThroughSmallRings) {
  for (int p : {2, 3, 4}) {
    auto st = OnGlooRanks(p, Linked(5000), [&](GlooCommunicator& c) -> absl::Status {
      if (c.shared_memory_links() != p - 1) {
        return absl::InternalError(absl::StrCat(c.shared_memory_links(), " links of ", p - 1));
      }
      // The names are gone once the group is made, while its segments are in use.
      if (!SegmentsOf(::getpid()).empty()) return absl::InternalError("a segment's name is left in /dev/shm");
      const int right = (c.rank() + 1) % p, left = (c.rank() + p - 1) % p;
      int round = 0;
      for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, size_t{300000}}) {
        std::vector<float> a(n), b(n, -1.f);
        for (size_t i = 0; i < n; ++i) a[i] = Value(c.rank(), i, round);
        if (auto s = c.SendRecv(a.data(), n, right, b.data(), n, left); !s.ok()) return s;
        if (auto s = Expect(b, left, round, "send_recv"); !s.ok()) return s;
        ++round;
        for (size_t i = 0; i < n; ++i) a[i] = Value(c.rank(), i, round);
        std::fill(b.begin(), b.end(), -1.f);
        if (c.rank() % 2 == 0) {
          if (auto s = c.Send(a.data(), n, right); !s.ok()) return s;
          if (auto s = c.Recv(b.data(), n, left); !s.ok()) return s;
        } else {
          if (auto s = c.Recv(b.data(), n, left); !s.ok()) return s;
          if (auto s = c.Send(a.data(), n, right); !s.ok()) return s;
        }
        if (auto s = Expect(b, left, round, "recv"); !s.ok()) return s;
        ++round;
      }
      // The collectives keep TCP alongside.
      std::vector<float> x(100, 1.f);
      if (auto s = c.AllReduceSum(x.data(), x.size()); !s.ok()) return s;
      if (x[7] != static_cast<float>(p)) return absl::InternalError("all_reduce beside the links");
      return absl::OkStatus();
    });
    for (const auto& s : st) EXPECT_TRUE(s.ok()) << s << " (p " << p << ")";
  }
  EXPECT_TRUE(SegmentsOf(::getpid()).empty()) << SegmentsOf(::getpid())[0];
}

// Without the option, or with GANTRY_SHM_DISABLE=1, every transfer keeps TCP; GlooGroups links
// the point-to-point groups (pp, cp) and no other.
TEST(GlooSharedMemoryTest, OnlyThePointToPointGroupsAreLinkedAndTheEnvironmentTurnsItOff) {
  auto links = [](const GlooOptions& o) {
    std::vector<int> n(2, -1);
    auto st = OnGlooRanks(2, o, [&](GlooCommunicator& c) {
      n[static_cast<size_t>(c.rank())] = c.shared_memory_links();
      return absl::OkStatus();
    });
    return n[0] + n[1];
  };
  EXPECT_EQ(links(GlooOptions{}), 0);
  EXPECT_EQ(links(Linked(4096)), 2);
  ::setenv("GANTRY_SHM_DISABLE", "1", 1);
  EXPECT_EQ(links(Linked(4096)), 0);
  ::unsetenv("GANTRY_SHM_DISABLE");

  EXPECT_TRUE(PointToPointGroup("pp/r0/t0"));
  EXPECT_TRUE(PointToPointGroup("cp/s0/r0/t0"));
  EXPECT_FALSE(PointToPointGroup("dp/s0/t0"));
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<int> got(4, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      GroupFactory f = GlooGroups(store, {});
      auto pp = f("pp/r0/t0", {0, 1}, r);
      auto dp = f("dp/s0/t0", {0, 1}, r);
      if (pp.ok()) got[static_cast<size_t>(r)] = static_cast<GlooCommunicator&>(**pp).shared_memory_links();
      if (dp.ok()) got[static_cast<size_t>(2 + r)] = static_cast<GlooCommunicator&>(**dp).shared_memory_links();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(got, (std::vector<int>{1, 1, 0, 0}));
}

// A rank that offers no link (GANTRY_SHM_DISABLE=1 in its process) still takes part in making
// them, so that its peers do not wait for it: every pair keeps TCP and the transfers go.
TEST(GlooSharedMemoryTest, ARankThatOffersNoLinkLeavesItsPeersOnTcpWithoutWaiting) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<absl::Status> st(3);
  std::vector<int> links(3, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o = Linked(4096, std::chrono::milliseconds(5000));
      o.shm_offer = r != 1;
      auto c = GlooCommunicator::Create(r, 3, store, o);
      if (!c.ok()) {
        st[r] = c.status();
        return;
      }
      links[r] = (*c)->shared_memory_links();
      const int right = (r + 1) % 3, left = (r + 2) % 3;
      std::vector<float> a(10000), b(10000, -1.f);
      for (size_t i = 0; i < a.size(); ++i) a[i] = Value(r, i, 0);
      st[r] = (*c)->SendRecv(a.data(), a.size(), right, b.data(), b.size(), left);
      if (st[r].ok()) st[r] = Expect(b, left, 0, "send_recv");
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  EXPECT_EQ(links, (std::vector<int>{1, 0, 1})) << "ranks 0 and 2 linked, rank 1 on TCP with both";
}

// A message of another size than the receiver expects is an error naming both counts, not
// data spilled into the next message: on the receiver, and on a sender whose message did not
// fit the ring (it would otherwise wait for room until its timeout); a peer that never comes
// is a timeout naming it.
TEST(GlooSharedMemoryTest, AWrongSizeAndAMissingPeerAreErrorsNamingThem) {
  auto st = OnGlooRanks(2, Linked(4096, std::chrono::milliseconds(1000)), [](GlooCommunicator& c) -> absl::Status {
    std::vector<float> x(20, 1.f);
    if (c.rank() == 0) return c.Send(x.data(), 10, 1);
    return c.Recv(x.data(), 20, 0);
  });
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_FALSE(st[1].ok());
  EXPECT_TRUE(absl::StrContains(st[1].message(), "rank 0 sent 40 bytes where rank 1 expected 80")) << st[1];

  const auto t0 = std::chrono::steady_clock::now();
  st = OnGlooRanks(2, Linked(4096, std::chrono::milliseconds(20000)), [](GlooCommunicator& c) -> absl::Status {
    std::vector<float> x(20000, 1.f);
    if (c.rank() == 0) return c.Send(x.data(), 10000, 1);
    return c.Recv(x.data(), 20000, 0);
  });
  EXPECT_TRUE(absl::StrContains(st[1].message(), "rank 0 sent 40000 bytes where rank 1 expected 80000")) << st[1];
  EXPECT_TRUE(absl::StrContains(st[0].message(), "rank 1 refused the 40000 bytes rank 0 sent: it expected 80000"))
      << st[0];
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0)
      << "both ranks fail at once, not at the 20 s timeout";

  // Rank 1 never receives: rank 0's message, larger than the ring, cannot all go.
  st = OnGlooRanks(2, Linked(4096, std::chrono::milliseconds(800)), [](GlooCommunicator& c) -> absl::Status {
    std::vector<float> x(10000, 1.f);
    if (c.rank() == 0) return c.Send(x.data(), x.size(), 1);
    return absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsDeadlineExceeded(st[0])) << st[0];
  EXPECT_TRUE(absl::StrContains(st[0].message(), "send to rank 1 over shared memory timed out")) << st[0];
}

// Abort ends a receive that waits on its link at once, not at the timeout. (The aborting thread
// is joined before the communicator goes: Abort, like every call, needs its communicator alive.)
TEST(GlooSharedMemoryTest, AbortWakesAReceiveWaitingOnItsLink) {
  const auto t0 = std::chrono::steady_clock::now();
  auto st = OnGlooRanks(2, Linked(4096, std::chrono::milliseconds(30000)), [&](GlooCommunicator& c) -> absl::Status {
    if (c.rank() == 1) return absl::OkStatus();
    std::atomic<bool> done{false};
    std::thread aborter([&] {
      // Once rank 0's receive has slept on its doorbell (the link counts it), abort it.
      while (!done) {
        if (c.shared_memory_waits() > 0) {
          c.Abort();
          return;
        }
        std::this_thread::yield();
      }
    });
    std::vector<float> x(16);
    absl::Status s = c.Recv(x.data(), x.size(), 1);
    done = true;
    aborter.join();
    return s;
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(absl::IsAborted(st[0])) << st[0];
  EXPECT_LT(secs, 10.0) << "the abort must end the wait, not the 30 s timeout";
}

// Two processes: a parent and its child (forked before this process has any other thread)
// meet through a file store, are linked, and pass a message each way, the second larger than
// the ring, the child sending back what it received, doubled.
TEST(GlooSharedMemoryTest, TwoProcessesAreLinked) {
  testing::TempDir dir;
  const size_t n = 100000;
  auto run = [&](int rank) -> absl::Status {
    auto store = std::make_shared<gloo::rendezvous::FileStore>(dir.path());
    auto c = GlooCommunicator::Create(rank, 2, store, Linked(64 << 10));
    if (!c.ok()) return c.status();
    if ((*c)->shared_memory_links() != 1) return absl::InternalError("not linked");
    std::vector<float> x(n);
    if (rank == 0) {
      for (size_t i = 0; i < n; ++i) x[i] = Value(0, i, 0);
      if (auto s = (*c)->Send(x.data(), n, 1); !s.ok()) return s;
      std::vector<float> back(n);
      if (auto s = (*c)->Recv(back.data(), n, 1); !s.ok()) return s;
      for (size_t i = 0; i < n; ++i) {
        if (back[i] != 2 * x[i]) return absl::InternalError(absl::StrCat("element ", i, " came back ", back[i]));
      }
      return absl::OkStatus();
    }
    if (auto s = (*c)->Recv(x.data(), n, 0); !s.ok()) return s;
    for (float& v : x) v *= 2;
    return (*c)->Send(x.data(), n, 0);
  };
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const absl::Status s = run(1);
    if (!s.ok()) std::fprintf(stderr, "child: %s\n", s.ToString().c_str());
    ::_exit(s.ok() ? 0 : 1);
  }
  const absl::Status s = run(0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "the child failed: " << wstatus;
  EXPECT_TRUE(SegmentsOf(::getpid()).empty());
  EXPECT_TRUE(SegmentsOf(child).empty());
}

}  // namespace
}  // namespace gantry::comm
