// `parallel: auto` at placement: which workers an auto job takes and the layout it runs in on
// them, by the step cost model (jobspec/auto_layout.h), for the device kind, count and memory
// the workers reported when they attached. The scheduler asks it for each auto job at the head
// of its kind's queue (scheduler.h), at every placement: a job placed again after a failure,
// on more or fewer workers, gets its layout chosen again (its checkpoint is resharded to it).
//
// Which workers: resources.workers of them when the spec states it (the job waits for that
// many); otherwise the most of the idle ones that some layout fits, from all of them down.
// Which layout: the first the cost model ranks, among those the spec admits, whose
// tensor-parallel groups the idle hosts can hold (placement::ChooseSlots). The cluster it
// plans on: the coordinator's --cluster, or jobspec::DefaultCluster of the workers' kind; in
// either case each device's memory is the smallest of the idle workers' (a GPU's, or a CPU
// worker's host memory), a node is the largest host's idle slots, and a cpu worker's attention
// keeps its probabilities (the cpu backend's).
//
// Thread-compatible: the scheduler calls it under its owner's lock. It keeps the last decision
// of each job while the idle workers are the same, so a job that waits is not planned again on
// every pass.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/placement.h"
#include "jobspec/cluster.h"
#include "jobspec/job_spec.h"

namespace gantry::coordinator {

class AutoPlacer {
 public:
  explicit AutoPlacer(std::optional<jobspec::ClusterSpec> cluster) : cluster_(std::move(cluster)) {}

  // An idle worker of the job's kind, as it attached (v1::Resources).
  struct Worker {
    std::string id, host;
    int slots = 1;
    std::string device_kind, device_name;
    int64_t memory = 0;  // each rank's: a GPU's memory, or a cpu worker's host memory; 0: unknown
  };
  struct Decision {
    enum class What { kPlace, kWait, kFail };
    What what = What::kWait;
    jobspec::JobSpec spec;              // kPlace: the spec with its layout chosen (auto off)
    std::vector<placement::Slot> slots;  // kPlace: rank r on idle[slots[r].worker], local index .local
    std::string event;                  // kPlace: the layout and its prediction, for the job's events
    std::string why;                    // kWait, kFail: in words, with the memory needed and available
  };
  // job_key: the job's id (the decision is kept for it while `idle` and alive_slots stay the
  // same). alive_slots: the slots of every attached worker of the kind,
  // busy or idle (a job that fits none of the idle counts but would fit them waits; one that
  // fits neither fails).
  Decision Decide(const std::string& job_key, const jobspec::JobSpec& spec, const std::vector<Worker>& idle,
                  int alive_slots);
  // Forgets a job's kept decision (it was placed or left the queue).
  void Forget(const std::string& job_key) { kept_.erase(job_key); }

 private:
  Decision Compute(const jobspec::JobSpec& spec, const std::vector<Worker>& idle, int alive_slots) const;

  const std::optional<jobspec::ClusterSpec> cluster_;
  std::map<std::string, std::pair<std::string, Decision>> kept_;  // job key → (inputs' signature, decision)
};

}  // namespace gantry::coordinator
