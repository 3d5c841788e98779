// Preemption (issue 50 item 4): which running jobs give their workers to a job that cannot
// be placed. A function of the state it reads (no locks, no I/O), as placement.h's and
// quota.h's; the scheduler gathers the candidates and the cluster carries the preemption out
// (checkpoint, release, PREEMPTED: cluster.h).
//
// The rule, in order (docs/operations.md "Preemption"):
//   - Only candidates the caller's predicate admits are preempted: for a job that cannot be
//     placed, running jobs of its device kind of lower priority whose spec has
//     scheduling.preemptible (a later caller that reclaims borrowed capacity passes its own).
//   - Nothing is preempted unless the idle slots and what the admitted candidates would free
//     together cover the need: preempting cannot help otherwise.
//   - Victims are taken one at a time until the need is covered. Among the candidates that
//     cover what is still missing on their own, the one that frees the fewest slots in excess;
//     if none does, the one that frees the most (fewest victims). Ties, in order: the lower
//     priority, the least work since its last committed checkpoint (steps), the youngest (the
//     latest submitted), the larger id.
//   - Then a victim whose slots the others already cover is spared (the most work first), so
//     that no job is preempted for nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gantry::coordinator::preemption {

struct Candidate {
  std::string job_id;
  std::string team;
  int32_t priority = 0;
  int64_t slots = 0;                // what preempting it frees (its placed ranks)
  int64_t steps_since_checkpoint = 0;  // work a stop past its grace period would lose
  int64_t submit_time_unix_ms = 0;  // age: the youngest goes first
};

// The victims, in the order they were chosen; empty: preempt nothing. need: the slots the
// job waiting needs; idle: the slots idle now (and those already being freed for it).
std::vector<Candidate> ChooseVictims(const std::vector<Candidate>& candidates, int64_t need, int64_t idle,
                                     const std::function<bool(const Candidate&)>& admit);

}  // namespace gantry::coordinator::preemption
