#include "coordinator/auto_placer.h"

#include <algorithm>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "jobspec/auto_layout.h"

namespace gantry::coordinator {

AutoPlacer::Decision AutoPlacer::Decide(const std::string& job_key, const jobspec::JobSpec& spec,
                                        const std::vector<Worker>& idle, int alive_slots) {
  std::string signature = absl::StrCat(alive_slots);
  for (const Worker& w : idle) absl::StrAppend(&signature, ",", w.id, ":", w.slots, ":", w.memory);
  auto it = kept_.find(job_key);
  if (it != kept_.end() && it->second.first == signature) return it->second.second;
  Decision d = Compute(spec, idle, alive_slots);
  kept_[job_key] = {signature, d};
  return d;
}

AutoPlacer::Decision AutoPlacer::Compute(const jobspec::JobSpec& spec, const std::vector<Worker>& idle,
                                         int alive_slots) const {
  Decision d;
  const std::string& kind = spec.resources.device;
  int idle_slots = 0;
  std::map<std::string, int> host_slots;
  int64_t memory = std::numeric_limits<int64_t>::max();
  std::string device_name;
  for (const Worker& w : idle) {
    idle_slots += w.slots;
    host_slots[w.host] += w.slots;
    if (w.memory > 0) memory = std::min(memory, w.memory);
    if (device_name.empty()) device_name = w.device_name;
  }
  const int want = spec.resources.workers;  // 0: as many as fit
  if (idle_slots == 0 || (want > 0 && idle_slots < want)) {
    d.why = absl::StrCat("waiting for ", std::max(want, 1), " idle ", kind, " slots (", idle_slots, " idle)");
    return d;
  }
  // The cluster: the coordinator's, or the kind's default; each device the idle workers'.
  std::string source;
  jobspec::ClusterSpec cluster;
  if (cluster_) {
    cluster = *cluster_;
    source = absl::StrCat("cluster ", cluster.name, " (--cluster)");
  } else {
    std::string why;
    cluster = jobspec::DefaultCluster(kind, device_name, &why);
    source = absl::StrCat("cluster ", cluster.name, " (", why, ")");
  }
  if (memory != std::numeric_limits<int64_t>::max()) cluster.device.memory = static_cast<double>(memory);
  cluster.gpus_per_node = 1;
  for (const auto& [host, n] : host_slots) cluster.gpus_per_node = std::max(cluster.gpus_per_node, n);
  if (kind == "cpu") cluster.device.unfused_attention = true;
  std::vector<placement::IdleWorker> slots;
  for (const Worker& w : idle) slots.push_back({w.host, w.slots});

  // The counts to try: the stated one, or every count from the idle slots down.
  std::string first_refusal, groups_refusal;
  for (int world = want > 0 ? want : idle_slots; world >= (want > 0 ? want : 1); --world) {
    auto choices = jobspec::ChooseLayouts(spec, cluster, world, 8);
    if (!choices.ok()) {
      // The first that names memory (a count with layouts, none fitting), else the first.
      const std::string m(choices.status().message());
      const bool memory = absl::StrContains(m, "the least any needs");
      if (first_refusal.empty() || (memory && !absl::StrContains(first_refusal, "the least any needs"))) first_refusal = m;
      continue;
    }
    for (jobspec::LayoutChoice& c : *choices) {
      std::vector<placement::Slot> chosen = placement::ChooseSlots(slots, world, c.spec.parallel.tp);
      if (chosen.empty()) {
        if (groups_refusal.empty()) {
          groups_refusal = absl::StrCat("its layouts of ", world, " need tensor-parallel groups of ",
                                        c.spec.parallel.tp, " on one host, which the idle hosts cannot hold");
        }
        continue;
      }
      d.what = Decision::What::kPlace;
      d.slots = std::move(chosen);
      d.event = absl::StrCat("parallel: auto on ", world, " ", kind, world == 1 ? " worker" : " workers", " (", source,
                             "): ", jobspec::DescribeChoice(c));
      d.spec = std::move(c.spec);
      return d;
    }
  }
  // None of the idle counts: with every attached worker's slots, would one fit?
  const std::string refusal = !groups_refusal.empty() && first_refusal.empty() ? groups_refusal : first_refusal;
  if (want == 0 && alive_slots > idle_slots) {
    if (jobspec::ChooseLayouts(spec, cluster, alive_slots, 1).ok()) {
      d.why = absl::StrCat("waiting for more idle ", kind, " workers: ", refusal, "; on all ", alive_slots,
                           " attached slots a layout fits");
      return d;
    }
  }
  if (!groups_refusal.empty() && first_refusal.empty()) {
    d.why = absl::StrCat("waiting for hosts with more idle slots: ", groups_refusal);
    return d;
  }
  d.what = Decision::What::kFail;
  d.why = absl::StrCat("parallel: auto: no layout fits the ", kind, " workers (", source, "): ", refusal);
  return d;
}

}  // namespace gantry::coordinator
