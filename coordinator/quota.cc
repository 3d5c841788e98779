#include "coordinator/quota.h"

#include <algorithm>

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

int64_t Room(const TeamQuotas& quotas, const Usage& usage, const std::string& team, const std::string& device) {
  auto q = quotas.find(team);
  if (q == quotas.end()) return -1;
  auto n = q->second.nominal.find(device);
  if (n == q->second.nominal.end()) return -1;
  return std::max<int64_t>(0, n->second - Used(usage, team, device));
}

std::string HoldReason(const TeamQuotas& quotas, const Usage& usage, const std::string& team,
                       const std::string& device, int64_t want) {
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
  if (want > nominal) {
    return absl::StrCat("team ", team, "'s quota of ", nominal, " ", SlotsName(device, nominal), " is less than the ",
                        want, " this job needs");
  }
  if (used >= nominal) {
    return absl::StrCat("team ", team, " at its quota: ", used, " of ", nominal, " ", SlotsName(device, nominal));
  }
  if (used + want > nominal) {
    return absl::StrCat("team ", team, " near its quota: ", used, " of ", nominal, " ", SlotsName(device, nominal),
                        " in use, and this job needs ", want);
  }
  return "";
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
