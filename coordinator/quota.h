// Team quotas in the scheduler (issue 50 item 3): what each team has placed, its dominant
// share of use over quota, and why a queued job of a team at its quota waits. Functions of
// the state they read (no locks, no I/O), as placement.h's; the quotas themselves come from
// the principals file's teams: section (common/principals.h, TeamQuota).
//
// A job's use is its placed ranks (one GPU each on a cuda kind, one cpu worker each on cpu)
// while it is SCHEDULED or RUNNING; a job counts for its record's team (the submitter's).
// A team that the quotas do not name, a job without a team, and a device kind that a team's
// quota does not name are not limited.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/principals.h"

namespace gantry::coordinator::quota {

// What one team has placed now.
struct Use {
  std::map<std::string, int64_t> slots;  // device kind -> placed ranks
  int64_t jobs = 0;                      // placed jobs, all kinds
};
using Usage = std::map<std::string, Use>;  // by team

// "GPU"/"GPUs" on a cuda kind ("cuda-emulated GPUs" on the emulator), "cpu slot(s)" on cpu.
std::string SlotsName(const std::string& device, int64_t n);

// The team's dominant share: the largest use / nominal over the kinds its quota gives more
// than 0 of (Ghodsi et al.'s dominant resource, with the quota as the capacity); 0 for a team
// without a quota. A team at its quota of its scarcest kind has 1.
double DominantShare(const TeamQuotas& quotas, const Usage& usage, const std::string& team);

// How many more slots of `device` the team may take now: -1 for no limit.
int64_t Room(const TeamQuotas& quotas, const Usage& usage, const std::string& team, const std::string& device);

// Why a job of `team` that needs `want` slots of `device` may not be placed now (empty: its
// team's quota and cap allow it), e.g. "team vision at its quota: 16 of 16 GPUs".
std::string HoldReason(const TeamQuotas& quotas, const Usage& usage, const std::string& team,
                       const std::string& device, int64_t want);

// Why a job of `team` with scheduling.preemptible: false that needs `want` slots of `device`
// is refused at submit (empty: admitted). Such a job is admitted only within its team's
// nominal quota of its kind: with `others` slots of that kind held by the team's
// non-preemptible jobs not ended, others + want must not exceed it. A team without a quota of
// the kind (or a job without a team) has none to be within.
std::string NotPreemptibleRefusal(const TeamQuotas& quotas, const std::string& team, const std::string& device,
                                  int64_t want, int64_t others);

}  // namespace gantry::coordinator::quota
