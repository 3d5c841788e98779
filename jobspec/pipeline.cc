#include "jobspec/pipeline.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gantry::jobspec {

absl::StatusOr<Schedule> ParseSchedule(const std::string& name) {
  if (name == "1f1b") return Schedule::k1F1B;
  if (name == "gpipe") return Schedule::kGPipe;
  return absl::InvalidArgumentError(absl::StrCat("parallel.schedule: '", name, "' is not 1f1b or gpipe"));
}

namespace {

// One stage's compute op of the interleaved schedule.
struct Compute {
  bool fwd;
  int chunk, micro;
};

// Every stage's ops of the interleaved schedule (pipeline.h), by the simulation the header
// describes, a stage receiving an input up to `ahead` computes before the one that needs it;
// empty if it deadlocks.
std::vector<std::vector<PipeOp>> SimulateInterleaved(const std::vector<std::vector<Compute>>& order, int p, int v,
                                                     int ahead) {
  const int last_vs = p * v - 1;
  auto vs = [&](int s, const Compute& c) { return c.chunk * p + s; };
  // Whether compute c of stage s receives its input (activation or gradient) / sends its result.
  auto needs = [&](int s, const Compute& c) { return c.fwd ? vs(s, c) > 0 : vs(s, c) < last_vs; };
  auto gives = [&](int s, const Compute& c) { return c.fwd ? vs(s, c) < last_vs : vs(s, c) > 0; };
  // Each stage's compute index of (forward, chunk, micro-batch).
  std::vector<std::map<std::tuple<bool, int, int>, size_t>> index(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    const auto& o = order[static_cast<size_t>(s)];
    for (size_t k = 0; k < o.size(); ++k) index[static_cast<size_t>(s)][{o[k].fwd, o[k].chunk, o[k].micro}] = k;
  }
  struct Stage {
    size_t next = 0;             // the next compute
    std::vector<size_t> unsent;  // computes whose result waits to be sent, oldest first
    std::vector<bool> input;     // each compute's input received (or none to receive)
    double clock = 0;
  };
  std::vector<Stage> st(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    for (const Compute& c : order[static_cast<size_t>(s)]) st[static_cast<size_t>(s)].input.push_back(!needs(s, c));
  }
  std::vector<std::vector<PipeOp>> ops(static_cast<size_t>(p));
  for (;;) {
    // The earliest event (a transfer before a compute at the same time): a compute whose input
    // is in, or a transfer of a result to the peer's compute that takes it, within `ahead` of
    // the peer's next.
    int best = -1, peer_of_best = -1;
    size_t message = 0, target = 0;
    double at = 0;
    bool done = true;
    for (int s = 0; s < p; ++s) {
      Stage& a = st[static_cast<size_t>(s)];
      const auto& o = order[static_cast<size_t>(s)];
      if (a.next < o.size() || !a.unsent.empty()) done = false;
      if (a.next < o.size() && a.input[a.next] && (best < 0 || a.clock < at)) {
        best = s;
        peer_of_best = -1;
        at = a.clock;
      }
      for (size_t j = 0; j < a.unsent.size(); ++j) {
        const Compute& c = o[a.unsent[j]];
        const int peer = c.fwd ? (s + 1) % p : (s + p - 1) % p;
        const Stage& b = st[static_cast<size_t>(peer)];
        // The peer's compute that takes it: the next virtual stage's forward, or the previous one's backward.
        const int to = vs(s, c) + (c.fwd ? 1 : -1);
        const size_t k = index[static_cast<size_t>(peer)].at({c.fwd, to / p, c.micro});
        const double t = std::max(a.clock, b.clock);
        if (k < b.next + static_cast<size_t>(ahead) && (best < 0 || t < at || (t == at && peer_of_best < 0))) {
          best = s;
          peer_of_best = peer;
          message = j;
          target = k;
          at = t;
        }
      }
    }
    if (done) break;
    if (best < 0) return {};  // deadlock
    Stage& a = st[static_cast<size_t>(best)];
    if (peer_of_best < 0) {
      const Compute& c = order[static_cast<size_t>(best)][a.next];
      ops[static_cast<size_t>(best)].push_back({c.fwd ? PipeOp::kForward : PipeOp::kBackward, c.micro, c.chunk});
      a.clock += c.fwd ? 1 : 2;
      if (gives(best, c)) a.unsent.push_back(a.next);
      ++a.next;
    } else {
      Stage& b = st[static_cast<size_t>(peer_of_best)];
      const Compute& c = order[static_cast<size_t>(best)][a.unsent[message]];
      const Compute& d = order[static_cast<size_t>(peer_of_best)][target];
      ops[static_cast<size_t>(best)].push_back({c.fwd ? PipeOp::kSendAct : PipeOp::kSendGrad, c.micro, c.chunk});
      ops[static_cast<size_t>(peer_of_best)].push_back({d.fwd ? PipeOp::kRecvAct : PipeOp::kRecvGrad, d.micro, d.chunk});
      a.clock = b.clock = at;
      a.unsent.erase(a.unsent.begin() + static_cast<std::ptrdiff_t>(message));
      b.input[target] = true;
    }
  }
  return ops;
}

// Every stage's ops of the interleaved schedule (pipeline.h): Narayanan et al.'s order of
// computes, the transfers by SimulateInterleaved with receives up to two computes ahead (one
// ahead leaves stages waiting on each other's sends: with a forward 1 and a backward 2, p 2,
// v 2, m 4 idles 17% of the step rather than 11%; two reach (p - 1) / (v·m + p - 1) for every
// p <= 8, v <= 4, m <= 16, pipeline_test), and the slots.
std::vector<std::vector<PipeOp>> InterleavedOps(int p, int m, int v) {
  const int total = m * v;
  auto nth = [&](int k, bool fwd) {
    const int c = (k / p) % v;
    return Compute{fwd, fwd ? c : v - 1 - c, (k / (p * v)) * p + k % p};
  };
  std::vector<std::vector<Compute>> order(static_cast<size_t>(p));
  for (int s = 0; s < p; ++s) {
    auto& o = order[static_cast<size_t>(s)];
    const int warm = std::min((p - s - 1) * 2 + (v - 1) * p, total);
    for (int k = 0; k < warm; ++k) o.push_back(nth(k, true));
    for (int i = 0; i < total - warm; ++i) {
      o.push_back(nth(warm + i, true));
      o.push_back(nth(i, false));
    }
    for (int i = total - warm; i < total; ++i) o.push_back(nth(i, false));
  }
  std::vector<std::vector<PipeOp>> ops;
  for (int ahead = 2; ops.empty() && ahead <= 2 * total; ++ahead) ops = SimulateInterleaved(order, p, v, ahead);
  // Slots: a (chunk, micro-batch) holds one from its first op to its last (the backward's send),
  // the lowest free one.
  for (auto& o : ops) {
    std::map<std::pair<int, int>, size_t> last;
    for (size_t i = 0; i < o.size(); ++i) last[{o[i].chunk, o[i].micro}] = i;
    std::map<std::pair<int, int>, int> slot;
    std::set<int> free_slots;
    int slots = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      const std::pair<int, int> key{o[i].chunk, o[i].micro};
      auto it = slot.find(key);
      if (it == slot.end()) {
        int k = slots;
        if (!free_slots.empty()) {
          k = *free_slots.begin();
          free_slots.erase(free_slots.begin());
        } else {
          ++slots;
        }
        it = slot.emplace(key, k).first;
      }
      o[i].slot = it->second;
      if (last[key] == i) free_slots.insert(it->second);
    }
  }
  return ops;
}

}  // namespace

absl::Status CheckInterleaved(Schedule schedule, int p, int m, int v) {
  if (v < 1) return absl::InvalidArgumentError(absl::StrCat("is ", v, ": must be >= 1"));
  if (v == 1) return absl::OkStatus();
  if (p < 2) {
    return absl::InvalidArgumentError(absl::StrCat("is ", v, " with pp ", p,
                                                   ": model chunks interleave over pipeline stages (pp > 1)"));
  }
  if (schedule != Schedule::k1F1B) {
    return absl::InvalidArgumentError(
        absl::StrCat("is ", v, ": model chunks run the interleaved 1F1B schedule, and parallel.schedule is gpipe"));
  }
  if (m % p != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "is ", v, ": the interleaved schedule takes the micro-batches of a step (", m,
        " = global_batch / (micro_batch x dp)) in groups of pp: pp ", p, " must divide them"));
  }
  return absl::OkStatus();
}

std::vector<PipeOp> PipelineOps(Schedule schedule, int p, int s, int m, int v) {
  if (v > 1) {
    // The simulation gives every stage's ops at once (70 ms at p 16, m 128, v 4), and the
    // planner asks for each stage and tensor rank in turn: kept for the (p, m, v) asked lately.
    static std::mutex mu;
    static std::map<std::tuple<int, int, int>, std::vector<std::vector<PipeOp>>> made;
    std::lock_guard<std::mutex> lock(mu);
    auto it = made.find({p, m, v});
    if (it == made.end()) {
      if (made.size() >= 16) made.clear();
      it = made.emplace(std::tuple<int, int, int>{p, m, v}, InterleavedOps(p, m, v)).first;
    }
    return it->second.empty() ? std::vector<PipeOp>{} : it->second[static_cast<size_t>(s)];
  }
  std::vector<PipeOp> ops;
  auto forward = [&](int i, bool send = true) {
    if (s > 0) ops.push_back({PipeOp::kRecvAct, i});
    ops.push_back({PipeOp::kForward, i});
    if (send && s < p - 1) ops.push_back({PipeOp::kSendAct, i});
  };
  auto backward = [&](int i, bool recv = true) {
    if (recv && s < p - 1) ops.push_back({PipeOp::kRecvGrad, i});
    ops.push_back({PipeOp::kBackward, i});
    if (s > 0) ops.push_back({PipeOp::kSendGrad, i});
  };
  if (schedule == Schedule::kGPipe) {
    for (int i = 0; i < m; ++i) forward(i);
    for (int i = 0; i < m; ++i) backward(i);
    return ops;
  }
  const int warm = std::min(p - s - 1, m);
  for (int i = 0; i < warm; ++i) forward(i);
  for (int i = 0; i < m - warm; ++i) {
    // Steady state: forward the newest, receive the oldest's gradient, then send the
    // newest's activation (after the receive: see the header), then the oldest's backward.
    const int newest = warm + i;
    forward(newest, /*send=*/false);
    if (s < p - 1) {
      ops.push_back({PipeOp::kRecvGrad, i});
      ops.push_back({PipeOp::kSendAct, newest});
    }
    backward(i, /*recv=*/false);
  }
  for (int i = m - warm; i < m; ++i) backward(i);
  return ops;
}

int PipelineSlots(Schedule schedule, int p, int s, int m, int v) {
  if (v > 1) {
    int most = 0;
    for (const PipeOp& op : PipelineOps(schedule, p, s, m, v)) most = std::max(most, op.slot + 1);
    return std::max(1, most);
  }
  return schedule == Schedule::kGPipe ? m : std::max(1, std::min(p - s, m));
}

double IdealBubble(int p, int m, int v) { return static_cast<double>(p - 1) / (static_cast<double>(v) * m + p - 1); }

}  // namespace gantry::jobspec
