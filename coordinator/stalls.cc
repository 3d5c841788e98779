#include "coordinator/stalls.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gantry::coordinator {

bool StallDetector::OnStep(const std::string& job_id, int64_t generation, int64_t step, double step_seconds,
                           int64_t now_ms) {
  Progress& p = progress_[job_id];
  if (p.generation > generation) return false;
  const bool was_stalled = p.reported && p.generation == generation;
  p = {generation, step, now_ms, step_seconds, false};
  return was_stalled;
}

std::vector<StallDetector::Entry> StallDetector::Overdue(int64_t now_ms) const {
  std::vector<Entry> out;
  for (const auto& [job_id, p] : progress_) {
    // A job whose steps keep coming costs nothing: only an overdue one is looked at further.
    const int64_t limit = std::max<int64_t>(stall_ms_, static_cast<int64_t>(10 * 1000 * p.step_seconds));
    if (now_ms - p.at_ms >= limit) out.push_back({job_id, p.generation, p.step, p.at_ms, p.reported});
  }
  return out;
}

double StallDetector::StepSeconds(const std::string& job_id, int64_t generation) const {
  auto it = progress_.find(job_id);
  return it != progress_.end() && it->second.generation == generation ? it->second.step_seconds : 0;
}

void StallDetector::MarkReported(const std::string& job_id) {
  if (auto it = progress_.find(job_id); it != progress_.end()) it->second.reported = true;
}

void StallDetector::Forget(const std::string& job_id) { progress_.erase(job_id); }

std::string DescribeStall(int64_t stalled_step, double stalled_seconds, int world,
                          const std::map<int, RankProgress>& ranks) {
  uint64_t most = 0;
  for (const auto& [r, x] : ranks) most = std::max(most, x.collectives_done);
  std::string behind;
  for (int r = 0; r < std::max(1, world); ++r) {
    auto x = ranks.find(r);
    if (x == ranks.end()) {
      absl::StrAppend(&behind, behind.empty() ? "" : "; ", "rank ", r, " (no heartbeat for this job)");
    } else if (x->second.collectives_done < most) {
      absl::StrAppend(&behind, behind.empty() ? "" : "; ", "rank ", r, " (", x->second.worker, ") at collective #",
                      x->second.collectives_done);
    }
  }
  return absl::StrFormat(
      "step %d stalled for %.1f s: %s", stalled_step, stalled_seconds,
      behind.empty() ? absl::StrCat("no rank is behind (every rank has completed collective #", most,
                                    "): a step or a collective is slow on all of them")
                     : absl::StrCat("behind: ", behind, "; the others have completed collective #", most));
}

}  // namespace gantry::coordinator
