// Stall detection: each running job's last step (its generation, number, time and duration).
// A job whose next step has not come for max(stall_ms, 10 x its last step time) is stalled;
// the ranks behind are named by the collectives their heartbeats say they completed. The
// cluster holds the detector under its lock and does the store and event side; the detector
// and DescribeStall are pure (tests/coordinator/stalls_test.cc).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gantry::coordinator {

class StallDetector {
 public:
  explicit StallDetector(int64_t stall_ms) : stall_ms_(stall_ms) {}

  // Step `step` of (job, generation) ended at now_ms, taking step_seconds. Older generations'
  // reports are ignored. True when that generation had been reported stalled: the stall is over.
  bool OnStep(const std::string& job_id, int64_t generation, int64_t step, double step_seconds, int64_t now_ms);

  struct Entry {
    std::string job_id;
    int64_t generation = 0, step = 0, at_ms = 0;
    bool reported = false;  // this stall has its event
  };
  // The jobs whose next step is overdue at now_ms (reported or not), in job order.
  std::vector<Entry> Overdue(int64_t now_ms) const;
  void MarkReported(const std::string& job_id);
  void Forget(const std::string& job_id);  // the job ended, or moved to another generation
  // The duration of the last step reported of (job, generation) in seconds; 0: none known.
  double StepSeconds(const std::string& job_id, int64_t generation) const;
  size_t size() const { return progress_.size(); }

 private:
  struct Progress {
    int64_t generation = 0, step = 0, at_ms = 0;
    double step_seconds = 0;
    bool reported = false;
  };
  int64_t stall_ms_;
  std::map<std::string, Progress> progress_;
};

// What a rank's heartbeat says of the stalled job: its worker, and the collectives it completed.
struct RankProgress {
  std::string worker;
  uint64_t collectives_done = 0;
};
// "step N stalled for S s: behind: rank r (worker) at collective #c; ...; the others have
// completed collective #m", or that no rank is behind. Ranks of [0, world) without a heartbeat
// for the job are named as such.
std::string DescribeStall(int64_t stalled_step, double stalled_seconds, int world,
                          const std::map<int, RankProgress>& ranks);

}  // namespace gantry::coordinator
