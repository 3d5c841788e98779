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

bool IsSend(const PipeOp& op) { return op.kind == PipeOp::kSendAct || op.kind == PipeOp::kSendGrad; }
bool IsTransfer(const PipeOp& op) { return op.kind != PipeOp::kForward && op.kind != PipeOp::kBackward; }
// The stage a transfer of stage s goes to or comes from: activations go forward round the ring
// (the interleaved schedule's last stage feeds the first), gradients back.
int PeerOf(const PipeOp& op, int s, int p) {
  const bool next = op.kind == PipeOp::kSendAct || op.kind == PipeOp::kRecvGrad;
  return next ? (s + 1) % p : (s + p - 1) % p;
}

// Whether op y of stage r is the transfer that op x of stage s meets: the other end of the same
// message (its micro-batch, and the chunk at the other end: round the ring, the last stage's
// chunk c feeds the first stage's chunk c + 1).
bool Meets(const PipeOp& x, int s, const PipeOp& y, int r, int p) {
  PipeOp::Kind kind = PipeOp::kRecvAct;
  int chunk = x.chunk;
  switch (x.kind) {
    case PipeOp::kSendAct: kind = PipeOp::kRecvAct, chunk += s == p - 1 ? 1 : 0; break;
    case PipeOp::kRecvAct: kind = PipeOp::kSendAct, chunk -= s == 0 ? 1 : 0; break;
    case PipeOp::kSendGrad: kind = PipeOp::kRecvGrad, chunk -= s == 0 ? 1 : 0; break;
    case PipeOp::kRecvGrad: kind = PipeOp::kSendGrad, chunk += s == p - 1 ? 1 : 0; break;
    default: return false;  // a compute
  }
  return y.kind == kind && y.micro == x.micro && y.chunk == chunk && PeerOf(x, s, p) == r && PeerOf(y, r, p) == s;
}

// The op of stage r that op x of stage s meets, from index `from`; -1 if none.
long Meeting(const std::vector<PipeOp>& o, const PipeOp& x, int s, int r, int p, size_t from = 0) {
  for (size_t j = from; j < o.size(); ++j) {
    if (Meets(x, s, o[j], r, p)) return static_cast<long>(j);
  }
  return -1;
}

// Pairs the exchanges (pipeline.h) of every stage's ops. Which op of the peer a transfer meets:
// between two stages, the k-th message one sends the other is the k-th that the other receives
// from it (one Gloo slot per sender, or NCCL's order per pair). Ops a, a + 1 of stage s, a send
// and a receive with one peer r, pair with ops c, c + 1 of r when a meets c and a + 1 meets
// c + 1: those were two consecutive rendezvous of the same two stages, now one. (a meeting c + 1
// and a + 1 meeting c cannot happen: that order deadlocks.) Leaves the ops as they are where the
// messages do not match one to one (no schedule here does that: pipeline_test).
void PairExchanges(std::vector<std::vector<PipeOp>>* all, int p) {
  if (p < 2) return;
  auto& ops = *all;
  // meets[s][i]: the index in the peer's ops of the transfer that op i of stage s meets (-1: none).
  std::vector<std::vector<long>> meets(static_cast<size_t>(p));
  std::map<std::pair<int, int>, std::vector<size_t>> sends, recvs;  // (from, to) → op indices, in order
  for (int s = 0; s < p; ++s) {
    const auto& o = ops[static_cast<size_t>(s)];
    meets[static_cast<size_t>(s)].assign(o.size(), -1);
    for (size_t i = 0; i < o.size(); ++i) {
      if (!IsTransfer(o[i])) continue;
      const int peer = PeerOf(o[i], s, p);
      if (IsSend(o[i])) {
        sends[{s, peer}].push_back(i);
      } else {
        recvs[{peer, s}].push_back(i);
      }
    }
  }
  for (const auto& [link, sent] : sends) {
    const auto it = recvs.find(link);
    if (it == recvs.end() || it->second.size() != sent.size()) return;
    for (size_t k = 0; k < sent.size(); ++k) {
      meets[static_cast<size_t>(link.first)][sent[k]] = static_cast<long>(it->second[k]);
      meets[static_cast<size_t>(link.second)][it->second[k]] = static_cast<long>(sent[k]);
    }
  }
  if (recvs.size() != sends.size()) return;
  for (int s = 0; s < p; ++s) {
    auto& o = ops[static_cast<size_t>(s)];
    for (size_t a = 0; a + 1 < o.size(); ++a) {
      const PipeOp &x = o[a], &y = o[a + 1];
      // (A joint op, or the partner of one, is taken: pairs formed from an earlier stage's side.)
      if (!IsTransfer(x) || !IsTransfer(y) || IsSend(x) == IsSend(y) || x.joint || y.joint) continue;
      const int r = PeerOf(x, s, p);
      if (PeerOf(y, s, p) != r || (a > 0 && o[a - 1].joint)) continue;
      const long c = meets[static_cast<size_t>(s)][a], d = meets[static_cast<size_t>(s)][a + 1];
      auto& q = ops[static_cast<size_t>(r)];
      if (c < 0 || d != c + 1 || q[static_cast<size_t>(c)].joint || q[static_cast<size_t>(d)].joint ||
          (c > 0 && q[static_cast<size_t>(c) - 1].joint)) {
        continue;
      }
      o[a].joint = true;
      q[static_cast<size_t>(c)].joint = true;
      ++a;
    }
  }
}

// Whether op i of a stage's ops o, a receive, is still before the compute that takes it when it
// runs at op k's place (i < k; a send always may).
bool ReceivedInTime(const std::vector<PipeOp>& o, size_t i, size_t k) {
  if (IsSend(o[i])) return true;
  const PipeOp::Kind uses = o[i].kind == PipeOp::kRecvAct ? PipeOp::kForward : PipeOp::kBackward;
  for (size_t j = i + 1; j < k; ++j) {
    if (o[j].kind == uses && o[j].micro == o[i].micro && o[j].chunk == o[i].chunk) return false;
  }
  return true;
}

// Makes exchanges of transfers left alone: a transfer X between stages s and r, and the next
// transfer Y between them, the other way, on both stages' ops (so each message stays in its
// place among those that go the same way), become one exchange at Y's rendezvous where the side
// that receives X does not need it before Y: X is sent later and received later, at a rendezvous
// the two stages hold anyway, and no stage reaches any rendezvous later than before (with
// transfers free the bubble is the same: pipeline_test). The sender keeps X in its slot meanwhile.
// The interleaved simulation runs each transfer as early as both ends allow, which leaves about
// a third of them alone at p 2; this pairs those of the steady state.
void DeferIntoExchanges(std::vector<std::vector<PipeOp>>* all, int p) {
  auto& ops = *all;
  // The next transfer in stage s's ops o with r after index i (o.size(): none).
  auto next_with = [&](const std::vector<PipeOp>& o, int s, int r, size_t i) {
    size_t k = i + 1;
    while (k < o.size() && !(IsTransfer(o[k]) && PeerOf(o[k], s, p) == r)) ++k;
    return k;
  };
  auto paired = [](const std::vector<PipeOp>& o, size_t i) { return o[i].joint || (i > 0 && o[i - 1].joint); };
  // Moves o[from] to just before o[before] (from < before).
  auto defer = [](std::vector<PipeOp>& o, size_t from, size_t before) {
    const auto at = [&](size_t i) { return o.begin() + static_cast<std::ptrdiff_t>(i); };
    std::rotate(at(from), at(from) + 1, at(before));
  };
  for (int s = 0; s < p; ++s) {
    auto& o = ops[static_cast<size_t>(s)];
    for (size_t i = 0; i < o.size(); ++i) {
      if (!IsTransfer(o[i]) || paired(o, i)) continue;
      const int r = PeerOf(o[i], s, p);
      const size_t k = next_with(o, s, r, i);
      if (k == o.size() || IsSend(o[k]) == IsSend(o[i]) || paired(o, k) || !ReceivedInTime(o, i, k)) continue;
      auto& q = ops[static_cast<size_t>(r)];
      const long jj = Meeting(q, o[i], s, r, p);
      if (jj < 0) continue;
      const size_t j = static_cast<size_t>(jj), l = next_with(q, r, s, j);
      if (paired(q, j) || l == q.size() || Meeting(q, o[k], s, r, p, l) != static_cast<long>(l) || paired(q, l) ||
          !ReceivedInTime(q, j, l)) {
        continue;
      }
      // (Neither insertion splits a pair: the op before Y is no pair's first, Y being alone.)
      defer(o, i, k);
      defer(q, j, l);
      o[k - 1].joint = q[l - 1].joint = true;
      --i;  // the op now at i is the one after the moved transfer
    }
  }
}

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
  if (!ops.empty()) {
    PairExchanges(&ops, p);
    DeferIntoExchanges(&ops, p);
  }
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

// Stage s's ops of GPipe or plain 1F1B (pipeline.h), before the exchanges are paired.
std::vector<PipeOp> StageOps(Schedule schedule, int p, int s, int m) {
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
  // Every stage's ops at once (the exchanges pair across stages; the interleaved simulation takes
  // 0.1 s at p 16, m 128, v 4), and the planner asks for each stage and tensor rank in turn: kept
  // for the (schedule, p, m, v) asked lately.
  static std::mutex mu;
  static std::map<std::tuple<Schedule, int, int, int>, std::vector<std::vector<PipeOp>>> made;
  std::lock_guard<std::mutex> lock(mu);
  const std::tuple<Schedule, int, int, int> key{schedule, p, m, v};
  auto it = made.find(key);
  if (it == made.end()) {
    if (made.size() >= 16) made.clear();
    std::vector<std::vector<PipeOp>> ops;
    if (v > 1) {
      ops = InterleavedOps(p, m, v);
    } else {
      for (int t = 0; t < p; ++t) ops.push_back(StageOps(schedule, p, t, m));
    }
    PairExchanges(&ops, p);
    it = made.emplace(key, std::move(ops)).first;
  }
  return static_cast<size_t>(s) < it->second.size() ? it->second[static_cast<size_t>(s)] : std::vector<PipeOp>{};
}

int PipelineRendezvous(const std::vector<PipeOp>& ops) {
  int n = 0;
  for (const PipeOp& op : ops) {
    if (op.kind != PipeOp::kForward && op.kind != PipeOp::kBackward) ++n;
    if (op.joint) --n;  // its partner, the next op, is the same rendezvous
  }
  return n;
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

absl::StatusOr<PipelineRun> SimulatePipeline(const std::vector<std::vector<PipeOp>>& ops,
                                             const std::function<double(int s, size_t i)>& seconds,
                                             double rendezvous_seconds) {
  const int p = static_cast<int>(ops.size());
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0), busy(static_cast<size_t>(p), 0);
  PipelineRun run;
  run.rendezvous.assign(static_cast<size_t>(p), 0);
  auto at = [&](int s, size_t ahead = 0) -> const PipeOp* {
    return pc[s] + ahead < ops[s].size() ? &ops[s][pc[s] + ahead] : nullptr;
  };
  for (;;) {
    bool moved = false, done = true;
    for (int s = 0; s < p; ++s) {
      const PipeOp* op = at(s);
      if (op == nullptr) continue;
      done = false;
      if (!IsTransfer(*op)) {
        const double t = seconds(s, pc[s]);
        clock[s] += t;
        busy[s] += t;
        ++pc[s];
        moved = true;
        continue;
      }
      const int peer = PeerOf(*op, s, p);
      const PipeOp* q = at(peer);
      if (q == nullptr || q->joint != op->joint) continue;
      size_t step = 1;
      if (op->joint) {
        const PipeOp *y = at(s, 1), *q2 = at(peer, 1);
        if (y == nullptr || q2 == nullptr || IsSend(*y) == IsSend(*op) || !Meets(*op, s, *q, peer, p) ||
            !Meets(*y, s, *q2, peer, p)) {
          continue;
        }
        step = 2;
      } else if (!Meets(*op, s, *q, peer, p)) {
        continue;
      }
      clock[s] = clock[peer] = std::max(clock[s], clock[peer]) + rendezvous_seconds;
      pc[s] += step;
      pc[peer] += step;
      ++run.rendezvous[s];
      ++run.rendezvous[peer];
      moved = true;
    }
    if (done) break;
    if (!moved) {
      std::string where;
      for (int s = 0; s < p; ++s) absl::StrAppend(&where, s > 0 ? ", " : "", "stage ", s, " at op ", pc[s]);
      return absl::FailedPreconditionError(absl::StrCat("the pipeline's ops deadlock: ", where));
    }
  }
  run.span = p > 0 ? *std::max_element(clock.begin(), clock.end()) : 0;
  for (int s = 0; s < p; ++s) {
    run.idle.push_back(run.span > 0 ? 1 - busy[s] / run.span : 0);
    run.bubble += run.idle.back() / p;
  }
  return run;
}

}  // namespace gantry::jobspec
