#include "coordinator/quota.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"

namespace gantry::coordinator::quota {

namespace {

int64_t Used(const Usage& usage, const std::string& team, const std::string& device) {
  auto u = usage.find(team);
  if (u == usage.end()) return 0;
  auto s = u->second.slots.find(device);
  return s == u->second.slots.end() ? 0 : s->second;
}

}  // namespace

std::string SlotsName(const std::string& device, int64_t n) {
  const char* plural = n == 1 ? "" : "s";
  if (device == "cpu") return absl::StrCat("cpu slot", plural);
  if (device == "cuda") return absl::StrCat("GPU", plural);
  return absl::StrCat(device, " GPU", plural);
}

double DominantShare(const TeamQuotas& quotas, const Usage& usage, const std::string& team) {
  auto q = quotas.find(team);
  if (q == quotas.end()) return 0;
  double share = 0;
  for (const auto& [device, nominal] : q->second.nominal) {
    if (nominal > 0) share = std::max(share, static_cast<double>(Used(usage, team, device)) / nominal);
  }
  return share;
}

FairShareQueue::FairShareQueue(const TeamQuotas& quotas, Usage usage, std::string device,
                               std::vector<Job> queue)
    : quotas_(quotas), usage_(std::move(usage)), device_(std::move(device)) {
  std::map<std::string, std::vector<Job>> by_team;
  for (Job& j : queue) {
    std::vector<Job>& to = by_team[j.team];
    if (to.empty()) to.reserve(queue.size() / 4);
    to.push_back(std::move(j));
  }
  teams_.reserve(by_team.size());
  for (auto& [team, jobs] : by_team) {  // the next at the back
    const auto later_first = [](const Job& a, const Job& b) { return b.key < a.key; };
    if (std::is_sorted(jobs.rbegin(), jobs.rend(), later_first)) {
      std::reverse(jobs.begin(), jobs.end());
    } else {
      std::sort(jobs.begin(), jobs.end(), later_first);
    }
    teams_.push_back({team, std::move(jobs), DominantShare(quotas_, usage_, team), false});
  }
}

FairShareQueue::FairShareQueue(const TeamQuotas& quotas, Usage usage, std::string device,
                               std::vector<std::string> teams, Source source)
    : quotas_(quotas), usage_(std::move(usage)), device_(std::move(device)), source_(std::move(source)) {
  std::sort(teams.begin(), teams.end());
  teams.erase(std::unique(teams.begin(), teams.end()), teams.end());
  teams_.reserve(teams.size());
  for (std::string& team : teams) {
    const double share = DominantShare(quotas_, usage_, team);
    teams_.push_back({std::move(team), {}, share, false});
  }
}

const FairShareQueue::Job* FairShareQueue::Head(Team& t) {
  if (!source_) return t.jobs.empty() ? nullptr : &t.jobs.back();
  if (!t.read) {
    t.head = source_(t.name, t.last);
    t.read = true;
  }
  return t.head ? &*t.head : nullptr;
}

FairShareQueue::Team* FairShareQueue::Find(const std::string& team) {
  auto it = std::lower_bound(teams_.begin(), teams_.end(), team,
                             [](const Team& t, const std::string& name) { return t.name < name; });
  return it != teams_.end() && it->name == team ? &*it : nullptr;
}

std::optional<FairShareQueue::Job> FairShareQueue::Next() {
  Team* best = nullptr;
  const Job* best_head = nullptr;
  for (Team& t : teams_) {
    if (t.held) continue;
    const Job* head = Head(t);
    if (head == nullptr) continue;
    if (best == nullptr) {
      best = &t;
      best_head = head;
      continue;
    }
    const placement::QueueKey& k = head->key;
    const placement::QueueKey& b = best_head->key;
    if (k.priority > b.priority ||
        (k.priority == b.priority && (t.share < best->share || (t.share == best->share && k < b)))) {
      best = &t;
      best_head = head;
    }
  }
  if (best == nullptr) return std::nullopt;
  if (source_) {
    Job j = *std::move(best->head);
    best->head.reset();
    best->read = false;
    best->last = j.key;
    return j;
  }
  Job j = std::move(best->jobs.back());
  best->jobs.pop_back();
  return j;
}

void FairShareQueue::Placed(const std::string& team, int64_t slots) {
  Use& u = usage_[team];
  u.slots[device_] += slots;
  ++u.jobs;
  if (Team* t = Find(team)) t->share = DominantShare(quotas_, usage_, team);
}

void FairShareQueue::Hold(const std::string& team) {
  if (Team* t = Find(team)) t->held = true;
}

std::vector<FairShareQueue::Job> FairShareQueue::Left(const std::string& team) const {
  auto it = std::find_if(teams_.begin(), teams_.end(), [&](const Team& t) { return t.name == team; });
  if (it == teams_.end()) return {};
  if (!source_) return {it->jobs.rbegin(), it->jobs.rend()};
  std::vector<Job> out;
  if (it->read && it->head) out.push_back(*it->head);
  std::optional<placement::QueueKey> after = it->read ? (it->head ? std::optional(it->head->key) : std::nullopt) : it->last;
  if (it->read && !it->head) return out;  // read to its end
  while (std::optional<Job> j = source_(it->name, after)) {
    after = j->key;
    out.push_back(*std::move(j));
  }
  return out;
}

namespace {

// Walks the queues as FairSharePositions says, handing each job its place; stops when `at`
// returns false.
void WalkFairShare(const TeamQuotas& quotas, Usage usage, std::map<std::string, std::vector<FairShareQueue::Job>> queues,
                   const std::function<bool(const std::string& id, int64_t pos, const std::string& before)>& at) {
  for (auto& [device, jobs] : queues) {
    FairShareQueue q(quotas, std::move(usage), device, std::move(jobs));
    int64_t pos = 0;
    std::string before;
    while (std::optional<FairShareQueue::Job> j = q.Next()) {
      if (!at(j->key.id, ++pos, before)) return;
      before = j->key.id;
      q.Placed(j->team, std::max<int64_t>(1, j->slots));
    }
    usage = q.TakeUsage();
  }
}

}  // namespace

std::map<std::string, std::pair<int64_t, std::string>> FairSharePositions(
    const TeamQuotas& quotas, Usage usage, std::map<std::string, std::vector<FairShareQueue::Job>> queues) {
  std::map<std::string, std::pair<int64_t, std::string>> out;
  WalkFairShare(quotas, std::move(usage), std::move(queues), [&](const std::string& id, int64_t pos, const std::string& before) {
    out.emplace(id, std::make_pair(pos, before));
    return true;
  });
  return out;
}

std::pair<int64_t, std::string> FairSharePosition(const TeamQuotas& quotas, Usage usage,
                                                  std::map<std::string, std::vector<FairShareQueue::Job>> queues,
                                                  const std::string& job_id) {
  std::pair<int64_t, std::string> out{0, ""};
  WalkFairShare(quotas, std::move(usage), std::move(queues), [&](const std::string& id, int64_t pos, const std::string& before) {
    if (id != job_id) return true;
    out = {pos, before};
    return false;
  });
  return out;
}

namespace {

// What a team of the cohort lends of `device` now: what it may lend of its quota (its
// lending_limit, else all of it) less what its own use takes of that (its use beyond the part
// it keeps for itself); below 0 where it borrows.
int64_t LendsNow(const TeamQuota& t, int64_t nominal, int64_t used, const std::string& device) {
  auto l = t.lending_limit.find(device);
  const int64_t lendable = l == t.lending_limit.end() ? nominal : std::min(l->second, nominal);
  return lendable - std::max<int64_t>(0, used - (nominal - lendable));
}

// The cohort's other teams' quota of `device` minus their use, summed (LendsNow: what their
// lending limits keep back is not counted): below 0 where they borrow more than the rest
// leave idle. None: no cohort, or the team's quota does not name the kind.
std::optional<int64_t> OthersLeft(const TeamQuotas& quotas, const Usage& usage, const std::string& team,
                                  const std::string& device) {
  auto q = quotas.find(team);
  if (q == quotas.end() || q->second.cohort.empty() || !q->second.nominal.count(device)) return std::nullopt;
  int64_t left = 0;  // the others' quota minus their use: a team over its quota (borrowing) counts below 0
  for (const auto& [other, t] : quotas) {
    if (other == team || t.cohort != q->second.cohort) continue;
    auto n = t.nominal.find(device);
    if (n != t.nominal.end()) left += LendsNow(t, n->second, Used(usage, other, device), device);
  }
  return left;
}

}  // namespace

int64_t Room(const TeamQuotas& quotas, const Usage& usage, const std::string& team, const std::string& device,
             bool borrow) {
  auto q = quotas.find(team);
  if (q == quotas.end()) return -1;
  auto n = q->second.nominal.find(device);
  if (n == q->second.nominal.end()) return -1;
  const int64_t own = n->second - Used(usage, team, device);
  if (!borrow) return std::max<int64_t>(0, own);
  std::optional<int64_t> others = OthersLeft(quotas, usage, team, device);
  // Its own quota is always its own (what it lent comes back by preemption, later); beyond it,
  // what the cohort leaves (the cohort's quota minus the cohort's use), up to what its
  // borrowing limit leaves (of a team already borrowing, own is below 0: own + the limit is
  // what its limit leaves).
  if (auto b = q->second.borrowing_limit.find(device); others && b != q->second.borrowing_limit.end()) {
    others = std::min(*others, b->second);
  }
  return std::max<int64_t>({0, own, others ? own + *others : 0});
}

std::optional<int64_t> Borrowable(const TeamQuotas& quotas, const Usage& usage, const std::string& team,
                                  const std::string& device) {
  if (!OthersLeft(quotas, usage, team, device)) return std::nullopt;
  const int64_t own = quotas.at(team).nominal.at(device) - Used(usage, team, device);
  return Room(quotas, usage, team, device) - std::max<int64_t>(0, own);
}

std::string HoldReason(const TeamQuotas& quotas, const Usage& usage, const std::string& team,
                       const std::string& device, int64_t want, bool borrow) {
  auto q = quotas.find(team);
  if (q == quotas.end()) return "";
  const TeamQuota& t = q->second;
  if (t.max_running_jobs > 0) {
    auto u = usage.find(team);
    if (u != usage.end() && u->second.jobs >= t.max_running_jobs) {
      return absl::StrCat("team ", team, " at its cap of ", t.max_running_jobs, " running job",
                          t.max_running_jobs == 1 ? "" : "s");
    }
  }
  auto n = t.nominal.find(device);
  if (n == t.nominal.end()) return "";
  const int64_t nominal = n->second, used = Used(usage, team, device);
  if (used + want <= nominal) return "";
  // Beyond its quota: what its cohort lends, if it has one.
  const std::optional<int64_t> lends = Borrowable(quotas, usage, team, device);
  if (borrow && lends && want <= Room(quotas, usage, team, device)) return "";
  // Its borrowing limit, where that (not the cohort's idle quota) is what stops it.
  auto b = t.borrowing_limit.find(device);
  const bool limited = lends && b != t.borrowing_limit.end() && b->second <= *OthersLeft(quotas, usage, team, device);
  const std::string cohort =
      !lends ? std::string()
      : !borrow ? "; it may not be preempted, so it does not borrow"
      : limited ? absl::StrCat("; its borrowing limit is ", b->second, " ", SlotsName(device, b->second),
                               " beyond its quota",
                               *lends > 0 ? absl::StrCat(", ", *lends, " of them left") : std::string())
      : *lends > 0 ? absl::StrCat("; its cohort ", t.cohort, " lends ", *lends, " now")
                   : absl::StrCat("; its cohort ", t.cohort, " has none idle to lend");
  if (want > nominal) {
    return absl::StrCat("team ", team, "'s quota of ", nominal, " ", SlotsName(device, nominal), " is less than the ",
                        want, " this job needs", cohort);
  }
  if (used > nominal) {  // borrowing already, or its quota lowered by a reload
    return absl::StrCat("team ", team, " over its quota: ", used, " of ", nominal, " ", SlotsName(device, nominal),
                        " in use", cohort);
  }
  if (used == nominal) {
    return absl::StrCat("team ", team, " at its quota: ", used, " of ", nominal, " ", SlotsName(device, nominal), cohort);
  }
  return absl::StrCat("team ", team, " near its quota: ", used, " of ", nominal, " ", SlotsName(device, nominal),
                      " in use, and this job needs ", want, cohort);
}

std::string ReclaimCohort(const TeamQuotas& quotas, const Usage& usage, const std::string& team,
                          const std::string& device, int64_t want) {
  auto q = quotas.find(team);
  if (q == quotas.end() || q->second.cohort.empty()) return "";
  auto n = q->second.nominal.find(device);
  if (n == q->second.nominal.end() || Used(usage, team, device) + want > n->second) return "";
  return q->second.cohort;
}

int64_t BorrowedBy(const TeamQuotas& quotas, const Usage& usage, const std::string& team, const std::string& device,
                   int64_t world) {
  auto q = quotas.find(team);
  if (q == quotas.end()) return 0;
  auto n = q->second.nominal.find(device);
  if (n == q->second.nominal.end()) return 0;
  const int64_t used = Used(usage, team, device);
  return std::max<int64_t>(0, used + world - n->second) - std::max<int64_t>(0, used - n->second);
}

int64_t Borrowed(const TeamQuotas& quotas, const Usage& usage, const std::string& team, const std::string& device) {
  auto q = quotas.find(team);
  if (q == quotas.end()) return 0;
  auto n = q->second.nominal.find(device);
  if (n == q->second.nominal.end()) return 0;
  return std::max<int64_t>(0, Used(usage, team, device) - n->second);
}

std::map<std::string, TeamFigures> Figures(const TeamQuotas& quotas, const Usage& usage,
                                           const std::vector<QueuedJob>& queued, int64_t now_ms) {
  std::map<std::string, TeamFigures> out;
  for (const auto& [team, q] : quotas) {
    TeamFigures& f = out[team];
    for (const auto& [device, nominal] : q.nominal) {
      f.nominal[device] = nominal;
      f.used[device] = 0;
    }
  }
  for (const auto& [team, u] : usage) {
    TeamFigures& f = out[team];
    for (const auto& [device, n] : u.slots) f.used[device] = n;
  }
  for (auto& [team, f] : out) {
    for (const auto& [device, n] : f.used) f.borrowed[device] = Borrowed(quotas, usage, team, device);
  }
  for (const QueuedJob& j : queued) {
    TeamFigures& f = out[j.team];
    ++f.queued;
    if (j.held) {
      ++f.held;
    } else {
      f.oldest_wait_seconds = std::max(f.oldest_wait_seconds, std::max<int64_t>(0, now_ms - j.queued_since_ms) / 1000.0);
    }
  }
  return out;
}

std::string NotPreemptibleRefusal(const TeamQuotas& quotas, const std::string& team, const std::string& device,
                                  int64_t want, int64_t others) {
  const std::string head = "scheduling.preemptible: false is admitted only within the team's nominal quota: ";
  if (team.empty()) return head + "the job has no team (its submitter's identity names none), so no quota";
  auto q = quotas.find(team);
  auto n = q == quotas.end() ? nullptr : &q->second.nominal;
  if (n == nullptr || n->find(device) == n->end()) {
    return absl::StrCat(head, "team ", team, " has no quota of ", SlotsName(device, 2));
  }
  const int64_t nominal = n->at(device);
  if (others + want > nominal) {
    return absl::StrCat(head, "team ", team, "'s is ", nominal, " ", SlotsName(device, nominal),
                        others > 0 ? absl::StrCat(", its other non-preemptible jobs hold ", others) : std::string(),
                        " and this job needs ", want, " (set scheduling.preemptible: true, or ask for a larger quota)");
  }
  return "";
}

}  // namespace gantry::coordinator::quota
