// The Gloo communicator with real TCP connections on loopback: each rank a thread of this
// process, meeting through an in-memory rendezvous store. (The worker's choice of communicator
// by device is tests/worker/agent/device_groups_test's.)
#include "comm/gloo/gloo_communicator.h"

#include <gloo/rendezvous/hash_store.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cast.h"
#include "tests/alltoall_util.h"
#include "tests/comm/gloo_ranks.h"
#include "tests/counting_communicator.h"

namespace gantry::comm {
namespace {

// Runs fn(comm) on `size` ranks at once; returns each rank's status.
std::vector<absl::Status> OnRanks(int size, const std::function<absl::Status(Communicator&)>& fn,
                                  std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  GlooOptions o;
  o.timeout = timeout;
  return OnGlooRanks(size, o, fn);
}

// Runs fn on rank 0 of 2 while rank 1, connected, never arrives at a collective (it waits
// until rank 0 is done); rank 0's status.
absl::Status WithoutRankOne(const std::function<absl::Status(Communicator&)>& fn, std::chrono::milliseconds timeout) {
  std::promise<void> rank0_done;
  std::shared_future<void> done = rank0_done.get_future().share();
  auto st = OnRanks(
      2,
      [&](Communicator& c) -> absl::Status {
        if (c.rank() == 1) {
          done.wait_for(std::chrono::seconds(30));
          return absl::OkStatus();
        }
        absl::Status s = fn(c);
        rank0_done.set_value();
        return s;
      },
      timeout);
  return st[0];
}

float Value(int rank, size_t i) { return static_cast<float>(rank + 1) * 0.5f + static_cast<float>(i % 7); }

class GlooCommunicatorTest : public ::testing::TestWithParam<int> {
 protected:
  static void ReduceScatterCase(int p, size_t n);
};

TEST_P(GlooCommunicatorTest, AllReduceSums) {
  const int p = GetParam();
  for (size_t n : {size_t{1}, size_t{1000}, size_t{100003}}) {
    auto st = OnRanks(p, [&](Communicator& c) -> absl::Status {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = Value(c.rank(), i);
      if (auto s = c.AllReduceSum(x.data(), n); !s.ok()) return s;
      for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < p; ++r) want += Value(r, i);
        if (x[i] != want) return absl::InternalError(absl::StrCat("element ", i, ": ", x[i], " != ", want));
      }
      return absl::OkStatus();
    });
    for (const auto& s : st) EXPECT_TRUE(s.ok()) << s;
  }
}

TEST_P(GlooCommunicatorTest, ReduceScatterGivesEachRankItsSummedBlock) {
  const int p = GetParam();
  // (1 << 22) + 1237: more than the ring's working chunk of 2^22, so it runs in two.
  for (const size_t n : {size_t{1237}, (size_t{1} << 22) + 1237}) {
    if (n > 2000 && p != 2) continue;  // the chunking is the same at any size of the group
    ReduceScatterCase(p, n);
  }
}

void GlooCommunicatorTest::ReduceScatterCase(int p, size_t n) {
  auto st = OnRanks(p, [&](Communicator& c) -> absl::Status {
    std::vector<float> in(n * p), out(n, -1.f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = Value(c.rank(), i);
    if (auto s = c.ReduceScatterSum(in.data(), out.data(), n); !s.ok()) return s;
    for (size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < p; ++r) want += Value(r, c.rank() * n + i);
      if (std::fabs(out[i] - want) > 1e-5f * std::fabs(want)) {
        return absl::InternalError(absl::StrCat("rank ", c.rank(), " element ", i, ": ", out[i], " != ", want));
      }
    }
    return absl::OkStatus();
  });
  for (const auto& s : st) EXPECT_TRUE(s.ok()) << s << " (n " << n << ")";
}

TEST_P(GlooCommunicatorTest, AllGatherBroadcastSendRecvBarrier) {
  const int p = GetParam();
  const size_t n = 333;
  auto st = OnRanks(p, [&](Communicator& c) -> absl::Status {
    std::vector<float> mine(n), all(n * p, -1.f);
    for (size_t i = 0; i < n; ++i) mine[i] = Value(c.rank(), i);
    if (auto s = c.AllGather(mine.data(), all.data(), n); !s.ok()) return s;
    for (int r = 0; r < p; ++r) {
      for (size_t i = 0; i < n; ++i) {
        if (all[r * n + i] != Value(r, i)) return absl::InternalError("all_gather mismatch");
      }
    }
    std::vector<float> b(n, static_cast<float>(c.rank()));
    if (auto s = c.Broadcast(b.data(), n, p - 1); !s.ok()) return s;
    if (b[n / 2] != static_cast<float>(p - 1)) return absl::InternalError("broadcast mismatch");
    if (p > 1) {
      std::vector<float> msg(n, static_cast<float>(c.rank()) + 0.25f), got(n, -1.f);
      const int right = (c.rank() + 1) % p, left = (c.rank() + p - 1) % p;
      if (c.rank() % 2 == 0) {
        if (auto s = c.Send(msg.data(), n, right); !s.ok()) return s;
        if (auto s = c.Recv(got.data(), n, left); !s.ok()) return s;
      } else {
        if (auto s = c.Recv(got.data(), n, left); !s.ok()) return s;
        if (auto s = c.Send(msg.data(), n, right); !s.ok()) return s;
      }
      if (got[0] != static_cast<float>(left) + 0.25f) return absl::InternalError("send/recv mismatch");
    }
    if (auto s = c.Barrier(); !s.ok()) return s;
    if (c.seq() < 3) return absl::InternalError("sequence numbers did not advance");
    return absl::OkStatus();
  });
  for (const auto& s : st) EXPECT_TRUE(s.ok()) << s;
}

// One ring step, every rank sending to rank + 1 while it receives from rank - 1 (context
// parallelism's K/V exchange): Gloo's SendRecv, and the base class's default (Send and Recv in
// an order by rank's parity) over the same transport, which must not deadlock a ring of odd
// size either. Two steps in a row, the second carrying the first's data on, then one of no
// floats. A group of one has no other rank: the peers are INVALID_ARGUMENT, before a
// sequence number is taken.
TEST_P(GlooCommunicatorTest, SendRecvShiftsARing) {
  const int p = GetParam();
  for (bool native : {true, false}) {
    auto st = OnRanks(p, [&](Communicator& gloo) -> absl::Status {
      fakes::CountingCommunicator c(&gloo, native);
      const int right = (c.rank() + 1) % p, left = (c.rank() + p - 1) % p;
      const size_t n = 1001;
      std::vector<float> a(n), b(n, -1.f);
      for (size_t i = 0; i < n; ++i) a[i] = Value(c.rank(), i);
      if (p == 1) {
        absl::Status s = c.SendRecv(a.data(), n, right, b.data(), n, left);
        if (s.code() != absl::StatusCode::kInvalidArgument || !absl::StrContains(s.message(), "to rank 0") ||
            c.seq() != 0) {
          return absl::InternalError(absl::StrCat("a group of one's SendRecv answered ", s.ToString()));
        }
        return absl::OkStatus();
      }
      if (auto s = c.SendRecv(a.data(), n, right, b.data(), n, left); !s.ok()) return s;
      if (auto s = c.SendRecv(b.data(), n, right, a.data(), n, left); !s.ok()) return s;
      const int two_left = (c.rank() + 2 * p - 2) % p;
      for (size_t i = 0; i < n; ++i) {
        if (b[i] != Value(left, i) || a[i] != Value(two_left, i)) {
          return absl::InternalError(absl::StrCat("element ", i, ": ", b[i], ", ", a[i], " after two steps"));
        }
      }
      // A step with nothing to send or receive is a step all the same.
      if (auto s = c.SendRecv(a.data(), 0, right, b.data(), 0, left); !s.ok()) return s;
      if (c.floats_sent() != 2 * n) return absl::InternalError(absl::StrCat(c.floats_sent(), " floats sent"));
      // Gloo's own: one sequence number a step; the default: a send and a receive.
      if (c.seq() != (native ? 3u : 6u)) return absl::InternalError(absl::StrCat("seq ", c.seq()));
      return absl::OkStatus();
    });
    for (const auto& s : st) EXPECT_TRUE(s.ok()) << s << (native ? " (Gloo's SendRecv)" : " (the default)");
  }
}

// bf16 sums of small integers: every partial sum is an integer below 2^8, which bf16's 8
// significant bits hold exactly, so whatever the order of the additions the result is the
// exact sum, on every rank. The reduce-scatter also runs in place (out = in + rank·n).
int16_t Small(int rank, size_t i) { return static_cast<int16_t>((rank + 1) * (static_cast<int>(i % 11) - 5)); }

TEST_P(GlooCommunicatorTest, Bf16SumsOfSmallIntegersAreExact) {
  const int p = GetParam();
  for (size_t n : {size_t{1}, size_t{1001}, size_t{100003}}) {
    auto st = OnRanks(p, [&](Communicator& c) -> absl::Status {
      const uint64_t seq0 = c.seq();
      std::vector<uint16_t> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = kernels::Bf16Of(Small(c.rank(), i));
      if (auto s = c.AllReduceSumBf16(x.data(), n); !s.ok()) return s;
      for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < p; ++r) want += Small(r, i);
        if (kernels::FloatOfBf16(x[i]) != want) {
          return absl::InternalError(absl::StrCat("all_reduce element ", i, ": ", kernels::FloatOfBf16(x[i]), " != ", want));
        }
      }
      std::vector<uint16_t> in(n * p), out(n, 0x7fc0);  // out poisoned with NaN
      for (size_t i = 0; i < in.size(); ++i) in[i] = kernels::Bf16Of(Small(c.rank(), i));
      std::vector<uint16_t> in_place = in;
      if (auto s = c.ReduceScatterSumBf16(in.data(), out.data(), n); !s.ok()) return s;
      uint16_t* own = in_place.data() + static_cast<size_t>(c.rank()) * n;
      if (auto s = c.ReduceScatterSumBf16(in_place.data(), own, n); !s.ok()) return s;
      for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < p; ++r) want += Small(r, c.rank() * n + i);
        if (kernels::FloatOfBf16(out[i]) != want || own[i] != out[i]) {
          return absl::InternalError(absl::StrCat("rank ", c.rank(), " reduce_scatter element ", i, ": ",
                                                  kernels::FloatOfBf16(out[i]), " (in place ",
                                                  kernels::FloatOfBf16(own[i]), ") != ", want));
        }
      }
      if (c.seq() != seq0 + 3) return absl::InternalError(absl::StrCat("seq ", c.seq(), " after 3 collectives from ", seq0));
      return absl::OkStatus();
    });
    for (const auto& s : st) EXPECT_TRUE(s.ok()) << "n " << n << ": " << s;
  }
}

// bf16 sums of values that do not add exactly: each addition takes fp32 and rounds to the
// nearest bf16, so the all-reduce leaves every rank with the same bits (one rank reduces each
// segment and the others receive its result), within the rounding of p - 1 additions of the
// exact sum: |error| <= gamma sum |x|, gamma = (p - 1) u / (1 - (p - 1) u), the bound of a
// recursive sum whose each addition is off by at most u of its result (Higham, 4.2). Here u =
// 2^-8 (bf16's unit roundoff, 8 significant bits) + 2^-23 (the fp32 addition, exact unless
// the exponents are far apart, rounds once more before the bf16 rounding). With 2 ranks there
// is one addition, so the result is exactly the bf16 nearest the fp32 sum, and a
// reduce-scatter's block the same.
TEST_P(GlooCommunicatorTest, Bf16AllReduceGivesEveryRankTheSameBitsWithinTheRounding) {
  const int p = GetParam();
  const size_t n = 20011;
  auto value = [](int rank, size_t i) {
    return kernels::Bf16Of(std::sin(0.37f * static_cast<float>(i) + static_cast<float>(rank)) * (1.f + static_cast<float>(i % 5)));
  };
  std::vector<std::vector<uint16_t>> got(static_cast<size_t>(p));
  auto st = OnRanks(p, [&](Communicator& c) -> absl::Status {
    std::vector<uint16_t> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = value(c.rank(), i);
    if (auto s = c.AllReduceSumBf16(x.data(), n); !s.ok()) return s;
    got[static_cast<size_t>(c.rank())] = x;
    std::vector<uint16_t> in(n * p), out(n);
    for (size_t i = 0; i < in.size(); ++i) in[i] = value(c.rank(), i % n);
    if (auto s = c.ReduceScatterSumBf16(in.data(), out.data(), n); !s.ok()) return s;
    for (size_t i = 0; i < n && p == 2; ++i) {
      const uint16_t want = kernels::Bf16Of(kernels::FloatOfBf16(value(0, i)) + kernels::FloatOfBf16(value(1, i)));
      if (out[i] != want) return absl::InternalError(absl::StrCat("rank ", c.rank(), " reduce_scatter element ", i));
    }
    return absl::OkStatus();
  });
  for (const auto& s : st) ASSERT_TRUE(s.ok()) << s;
  size_t inexact = 0;
  for (size_t i = 0; i < n; ++i) {
    double exact = 0, magnitude = 0;
    for (int r = 0; r < p; ++r) {
      exact += kernels::FloatOfBf16(value(r, i));
      magnitude += std::fabs(kernels::FloatOfBf16(value(r, i)));
    }
    for (int r = 1; r < p; ++r) ASSERT_EQ(got[r][i], got[0][i]) << "rank " << r << " element " << i;
    const double sum = kernels::FloatOfBf16(got[0][i]);
    const double u = 0x1p-8 + 0x1p-23, gamma = (p - 1) * u / (1 - (p - 1) * u);
    ASSERT_LE(std::fabs(sum - exact), gamma * magnitude) << "element " << i;
    if (p == 2) {
      ASSERT_EQ(got[0][i], kernels::Bf16Of(kernels::FloatOfBf16(value(0, i)) + kernels::FloatOfBf16(value(1, i))))
          << "element " << i;
    }
    inexact += sum != exact;
  }
  if (p > 1) {
    EXPECT_GT(inexact, n / 4) << "most of these sums are not bf16 values: the rounding is exercised";
  }
}

// Every (sender, receiver, index) checked exactly (tests/alltoall_util.h); out poisoned with
// NaN, so an unwritten element fails.
TEST_P(GlooCommunicatorTest, AllToAllSendsEachChunkToItsRank) {
  const int p = GetParam();
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{100003}}) {
    const testing::RoutedCounts count = [n](int, int) { return n; };
    auto st = OnRanks(p, [&](Communicator& c) -> absl::Status {
      const std::vector<float> in = testing::RoutedInput(c.rank(), p, count);
      std::vector<float> out(n * p, NAN);
      if (auto s = c.AllToAll(in.data(), out.data(), n); !s.ok()) return s;
      if (std::string bad = testing::CheckRouted(out, c.rank(), p, count); !bad.empty()) return absl::InternalError(bad);
      if (c.seq() != 1 || c.completed() != 1) return absl::InternalError(absl::StrCat("seq ", c.seq()));
      return absl::OkStatus();
    });
    for (const auto& s : st) EXPECT_TRUE(s.ok()) << "n " << n << ": " << s;
  }
}

// Uneven counts with zeros: some pairs move nothing, and in the last pattern rank 0 sends and
// receives nothing at all (its buffers are empty vectors). Both sides take their counts from
// the same function, so they agree pairwise, as the caller must make them.
TEST_P(GlooCommunicatorTest, AllToAllVMovesUnevenAndZeroCounts) {
  const int p = GetParam();
  const std::vector<testing::RoutedCounts> patterns = {
      [](int from, int to) { return static_cast<size_t>((from + 2 * to) % 3) * 37; },
      [](int from, int to) { return static_cast<size_t>(1 + from + 1000 * to); },
      [](int from, int to) { return from == 0 || to == 0 ? size_t{0} : static_cast<size_t>(5 * from + to); },
  };
  auto st = OnRanks(p, [&](Communicator& c) -> absl::Status {
    for (size_t k = 0; k < patterns.size(); ++k) {
      std::vector<size_t> send, recv;
      testing::RoutedCountsOf(c.rank(), p, patterns[k], &send, &recv);
      const std::vector<float> in = testing::RoutedInput(c.rank(), p, patterns[k]);
      size_t total = 0;
      for (size_t v : recv) total += v;
      std::vector<float> out(total, NAN);
      if (auto s = c.AllToAllV(in.data(), send, out.data(), recv); !s.ok()) return s;
      if (std::string bad = testing::CheckRouted(out, c.rank(), p, patterns[k]); !bad.empty()) {
        return absl::InternalError(absl::StrCat("pattern ", k, ": ", bad));
      }
    }
    if (c.seq() != patterns.size()) return absl::InternalError(absl::StrCat("seq ", c.seq()));
    return absl::OkStatus();
  });
  for (const auto& s : st) EXPECT_TRUE(s.ok()) << s;
}

INSTANTIATE_TEST_SUITE_P(Sizes, GlooCommunicatorTest, ::testing::Values(1, 2, 3, 4));

// What one rank can see wrong in AllToAllV's counts is INVALID_ARGUMENT naming the vector,
// on every rank alike and before any sequence number is taken: the group is still usable.
TEST(GlooCommunicatorAllToAllTest, CountsOneRankCanSeeAreWrongAreAnErrorNamingThem) {
  auto st = OnRanks(3, [&](Communicator& c) -> absl::Status {
    const std::vector<size_t> three(3, 2), two(2, 2);
    std::vector<float> in(6, 1.f), out(6);
    std::vector<std::string> errors;
    for (const auto& [send, recv] : {std::pair{&two, &three}, std::pair{&three, &two}}) {
      const absl::Status s = c.AllToAllV(in.data(), *send, out.data(), *recv);
      if (!absl::IsInvalidArgument(s)) return absl::InternalError(absl::StrCat("not INVALID_ARGUMENT: ", s.ToString()));
      errors.emplace_back(s.message());
    }
    const std::string who = absl::StrCat("all_to_all_v on rank ", c.rank(), ": ");
    if (errors[0] != who + "send_counts has 2 entries, not one per rank of the group of 3" ||
        errors[1] != who + "recv_counts has 2 entries, not one per rank of the group of 3") {
      return absl::InternalError(absl::StrCat(errors[0], " | ", errors[1]));
    }
    std::vector<size_t> keeps_more = three;
    keeps_more[c.rank()] = 3;
    const absl::Status self = c.AllToAllV(in.data(), keeps_more, out.data(), three);
    if (!absl::IsInvalidArgument(self) ||
        self.message().find(absl::StrCat("send_counts[", c.rank(), "] = 3 but recv_counts[", c.rank(), "] = 2")) ==
            absl::string_view::npos) {
      return absl::InternalError(absl::StrCat("self count mismatch: ", self.ToString()));
    }
    if (c.seq() != 0) return absl::InternalError(absl::StrCat("an argument error took sequence number ", c.seq()));
    std::vector<float> mine(6, static_cast<float>(c.rank()));
    if (auto s = c.AllToAllV(mine.data(), three, out.data(), three); !s.ok()) return s;
    for (int from = 0; from < 3; ++from) {
      if (out[2 * from] != static_cast<float>(from)) return absl::InternalError("the group is not usable after them");
    }
    return absl::OkStatus();
  });
  for (const auto& s : st) EXPECT_TRUE(s.ok()) << s;
}

// Abort (the job's placement is over): the next all-to-all fails as ABORTED, naming itself,
// its sequence number and the rank, without waiting for a peer; the group stays failed.
TEST(GlooCommunicatorAllToAllTest, AfterAbortTheNextAllToAllFailsAborted) {
  std::vector<std::string> later(2);
  auto st = OnRanks(2, [&](Communicator& c) -> absl::Status {
    std::vector<float> in(8, 1.f), out(8);
    if (auto s = c.AllToAll(in.data(), out.data(), 4); !s.ok()) return s;
    c.Abort();
    const absl::Status s = c.AllToAll(in.data(), out.data(), 4);
    later[c.rank()] = std::string(c.AllToAllV(in.data(), {4, 4}, out.data(), {4, 4}).message());
    return s;
  });
  for (int r : {0, 1}) {
    EXPECT_TRUE(absl::IsAborted(st[r])) << st[r];
    EXPECT_EQ(st[r].message(), absl::StrCat("all_to_all #2 on rank ", r, ": the job's placement was aborted"));
    EXPECT_NE(later[r].find(absl::StrCat("all_to_all_v #3 on rank ", r, ": the group failed earlier: all_to_all #2")),
              std::string::npos)
        << later[r];
  }
}

TEST(GlooCommunicatorFailureTest, ABf16CollectiveFailsAsItsFp32TwinDoes) {
  // Rank 1 never arrives at the bf16 reduce-scatter: rank 0 fails within the timeout, naming
  // the collective, its sequence number and the missing rank; the group stays failed.
  std::string later;
  const absl::Status s = WithoutRankOne(
      [&](Communicator& c) {
        std::vector<uint16_t> x(2 << 14, 0x3f80), y(x.size() / 2);
        absl::Status s = c.ReduceScatterSumBf16(x.data(), y.data(), y.size());
        later = std::string(c.AllReduceSumBf16(x.data(), x.size()).message());
        return s;
      },
      std::chrono::milliseconds(1500));
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("reduce_scatter #1 failed on rank 0 of 2: rank 1 did not arrive"), absl::string_view::npos)
      << s;
  EXPECT_NE(later.find("all_reduce #2 on rank 0: the group failed earlier: reduce_scatter #1"), std::string::npos) << later;
}

TEST(GlooCommunicatorFailureTest, AMissingRankIsAnErrorNamingTheCollectiveNotAHang) {
  // Rank 1 is connected but never arrives at the all-reduce, or the all-to-all (it waits
  // until rank 0 is done): rank 0 must get an error within the timeout, not hang.
  const std::vector<std::pair<std::string, std::function<absl::Status(Communicator&)>>> cases = {
      {"all_reduce",
       [](Communicator& c) {
         std::vector<float> x(1000, 1.f);
         return c.AllReduceSum(x.data(), x.size());
       }},
      {"all_to_all_v",
       [](Communicator& c) {
         std::vector<float> in(2000, 1.f), out(2000);
         return c.AllToAllV(in.data(), {1000, 1000}, out.data(), {1000, 1000});
       }},
  };
  for (const auto& [name, fn] : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status s = WithoutRankOne(fn, std::chrono::milliseconds(1500));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(secs, 15.0) << name << ": the missing rank must become an error near the 1.5 s timeout";
    EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
    EXPECT_NE(s.message().find(name + " #1 failed on rank 0 of 2: rank 1 did not arrive"), absl::string_view::npos) << s;
  }
}

TEST(GlooCommunicatorFailureTest, EverySurvivorNamesTheRankThatDidNotArriveAndTheGroupStaysFailed) {
  // Ranks 0 and 1 of 3 reduce; rank 2 stays away. Both fail, both name rank 2 (not each
  // other), and a later collective answers at once with the first failure.
  std::promise<void> others_done;
  std::shared_future<void> done = others_done.get_future().share();
  std::atomic<int> finished{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<double> later_secs(3, 0);
  std::vector<std::string> later(3);
  auto st = OnRanks(
      3,
      [&](Communicator& c) -> absl::Status {
        std::vector<float> x(3 << 14, 1.f), y(x.size() / 3);
        if (c.rank() == 2) {
          done.wait_for(std::chrono::seconds(30));
          return absl::OkStatus();
        }
        absl::Status s = c.ReduceScatterSum(x.data(), y.data(), y.size());
        if (++finished == 2) others_done.set_value();
        const auto t1 = std::chrono::steady_clock::now();
        later[c.rank()] = std::string(c.Barrier().message());
        later_secs[c.rank()] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
        return s;
      },
      std::chrono::milliseconds(1500));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 15.0);
  for (int r : {0, 1}) {
    ASSERT_FALSE(st[r].ok()) << "rank " << r;
    EXPECT_NE(st[r].message().find(absl::StrCat("reduce_scatter #1 failed on rank ", r, " of 3: rank 2 did not arrive")),
              absl::string_view::npos)
        << st[r];
    EXPECT_NE(later[r].find("barrier #2 on rank " + std::to_string(r) + ": the group failed earlier: reduce_scatter #1"),
              std::string::npos)
        << later[r];
    EXPECT_LT(later_secs[r], 0.5) << "a broken group answers at once";
  }
}

// Gloo writes with writev: to a socket whose peer has gone that raises SIGPIPE, and its
// default action ends the process with no error (seen under ASan: a test process of eight
// ranks ended so). Once a group is made the process ignores SIGPIPE, so that the write fails
// with EPIPE and the collective with it. (Which of a closed peer's read and the next write
// reaches Gloo first is a race: the disposition is what is checked.)
TEST(GlooCommunicatorFailureTest, AProcessWithAGroupIgnoresSigpipe) {
  auto st = OnRanks(1, [](Communicator&) { return absl::OkStatus(); });
  ASSERT_TRUE(st[0].ok()) << st[0];
  struct sigaction now {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN) << "SIGPIPE would end the process when a peer has gone";
}

}  // namespace
}  // namespace gantry::comm
