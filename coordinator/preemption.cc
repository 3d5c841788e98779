#include "coordinator/preemption.h"

#include <algorithm>

#include "coordinator/placement.h"

namespace gantry::coordinator::preemption {

namespace {

// The ties after the slots: lower priority, less work lost, younger, the later id.
bool BeforeOnTies(const Candidate& a, const Candidate& b) {
  if (a.priority != b.priority) return a.priority < b.priority;
  if (a.steps_since_checkpoint != b.steps_since_checkpoint) return a.steps_since_checkpoint < b.steps_since_checkpoint;
  if (a.submit_time_unix_ms != b.submit_time_unix_ms) return a.submit_time_unix_ms > b.submit_time_unix_ms;
  return placement::JobIdLess()(b.job_id, a.job_id);
}

}  // namespace

std::vector<Candidate> ChooseVictims(const std::vector<Candidate>& candidates, int64_t need, int64_t idle,
                                     const std::function<bool(const Candidate&)>& admit) {
  std::vector<Candidate> pool;
  int64_t could_free = 0;
  for (const Candidate& c : candidates) {
    if (c.slots <= 0 || (admit && !admit(c))) continue;
    pool.push_back(c);
    could_free += c.slots;
  }
  int64_t missing = need - idle;
  if (missing <= 0 || could_free < missing) return {};
  std::vector<Candidate> chosen;
  while (missing > 0) {
    auto best = pool.end();
    for (auto it = pool.begin(); it != pool.end(); ++it) {
      if (best == pool.end()) {
        best = it;
        continue;
      }
      const bool covers = it->slots >= missing, best_covers = best->slots >= missing;
      if (covers != best_covers) {
        if (covers) best = it;
        continue;
      }
      // Both cover: fewer slots in excess. Neither: more slots (fewer victims).
      if (it->slots != best->slots) {
        if (covers ? it->slots < best->slots : it->slots > best->slots) best = it;
        continue;
      }
      if (BeforeOnTies(*it, *best)) best = it;
    }
    missing -= best->slots;
    chosen.push_back(*best);
    pool.erase(best);
  }
  // Spare a victim the others cover: the most work since its checkpoint first.
  std::vector<size_t> order(chosen.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return chosen[a].steps_since_checkpoint > chosen[b].steps_since_checkpoint;
  });
  std::vector<bool> spared(chosen.size(), false);
  for (size_t i : order) {
    if (-missing >= chosen[i].slots) {  // missing <= 0: -missing is the excess
      spared[i] = true;
      missing += chosen[i].slots;
    }
  }
  std::vector<Candidate> out;
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (!spared[i]) out.push_back(std::move(chosen[i]));
  }
  return out;
}

}  // namespace gantry::coordinator::preemption
