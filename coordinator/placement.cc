#include "coordinator/placement.h"

#include <algorithm>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "jobspec/model_layout.h"
#include "jobspec/partition.h"

namespace gantry::coordinator::placement {

std::vector<v1::Job> QueueOrder(const std::vector<v1::Job>& jobs) {
  std::vector<v1::Job> q;
  for (const auto& j : jobs) {
    if (Queued(j.state())) q.push_back(j);
  }
  std::stable_sort(q.begin(), q.end(),
                   [](const v1::Job& a, const v1::Job& b) { return QueueKey::Of(a) < QueueKey::Of(b); });
  return q;
}

int64_t RestartBackoffMs(int restarts_in_a_row) {
  const int n = restarts_in_a_row;
  return n <= 1 ? 0 : std::min<int64_t>(16000, int64_t{1000} << std::min(n - 2, 4));
}

std::vector<std::string> MissingCheckpointServers(const v1::Job& job, const std::vector<std::string>& live,
                                                  int64_t now_ms, int64_t wait_ms) {
  std::vector<std::string> out;
  if (job.state() != v1::RESTARTING || now_ms - job.failure_time_unix_ms() >= wait_ms) return out;
  for (const auto& server : job.checkpoint_servers()) {
    if (std::find(live.begin(), live.end(), server) == live.end()) out.push_back(server);
  }
  return out;
}

std::vector<Slot> ChooseSlots(const std::vector<IdleWorker>& idle, int world, int tp) {
  // Hosts in name order, then the fullest first; a host's workers with the most slots first.
  std::map<std::string, std::vector<size_t>> by_host;
  for (size_t i = 0; i < idle.size(); ++i) by_host[idle[i].host].push_back(i);
  std::vector<std::pair<int, std::vector<size_t>>> hosts;  // (idle slots, workers)
  for (auto& [host, ws] : by_host) {
    std::stable_sort(ws.begin(), ws.end(), [&](size_t a, size_t b) { return idle[a].slots > idle[b].slots; });
    int slots = 0;
    for (size_t w : ws) slots += std::max(0, idle[w].slots);
    hosts.emplace_back(slots, ws);
  }
  std::stable_sort(hosts.begin(), hosts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<Slot> chosen;
  if (world < 1) return chosen;
  // Best fit: the whole job on one worker.
  const size_t none = idle.size();
  size_t best = none;
  for (const auto& [slots, ws] : hosts) {
    for (size_t w : ws) {
      if (idle[w].slots >= world && (best == none || idle[w].slots < idle[best].slots)) best = w;
    }
  }
  if (best != none) {
    for (int r = 0; r < world; ++r) chosen.push_back({best, r});
    return chosen;
  }
  const size_t group = static_cast<size_t>(std::max(1, tp));
  for (const auto& [slots, ws] : hosts) {
    std::vector<Slot> host_slots;  // worker-major
    for (size_t w : ws) {
      for (int l = 0; l < idle[w].slots; ++l) host_slots.push_back({w, l});
    }
    for (size_t g = 0; g + group <= host_slots.size(); g += group) {
      for (size_t i = 0; i < group && static_cast<int>(chosen.size()) < world; ++i) chosen.push_back(host_slots[g + i]);
    }
  }
  if (static_cast<int>(chosen.size()) < world) chosen.clear();
  return chosen;
}

std::vector<v1::ParamRange> ParamRanges(const jobspec::JobSpec& spec, const std::vector<std::string>& servers,
                                        const std::function<std::string(const std::string&)>& data_address) {
  std::vector<v1::ParamRange> out;
  size_t n = 0;
  for (const auto& t : jobspec::ParameterLayout(spec.model)) n += t.numel;
  for (const auto& r : jobspec::PartitionParams(n, servers)) {
    v1::ParamRange& pr = out.emplace_back();
    pr.set_shard_server(r.shard_server);
    pr.set_begin(static_cast<int64_t>(r.begin));
    pr.set_end(static_cast<int64_t>(r.end));
    pr.set_data_address(data_address(r.shard_server));
  }
  return out;
}

absl::StatusOr<std::pair<std::string, int64_t>> ResumePoint(const v1::Job& job, const jobspec::JobSpec& spec,
                                                            Stored own, Stored from) {
  if (own.newest() > 0) return std::make_pair(job.id(), own.newest());
  const std::string& spec_from = spec.checkpoint.resume_from;
  if (spec_from.empty()) return std::make_pair(std::string(), int64_t{0});
  const size_t at = spec_from.find('@');
  const std::string other = spec_from.substr(0, at);
  int64_t step = 0;
  if (at != std::string::npos && (!absl::SimpleAtoi(spec_from.substr(at + 1), &step) || step < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint.resume_from: '", spec_from, "' is not JOB or JOB@STEP"));
  }
  if (at == std::string::npos) {
    step = from.newest();
    if (step == 0) {
      return absl::NotFoundError(
          absl::StrCat("checkpoint.resume_from: job ", other, " has no committed checkpoint on the shard servers"));
    }
  }
  return std::make_pair(other, step);
}

v1::Layout LayoutMessage(const jobspec::PlacedLayout& l) {
  v1::Layout m;
  m.set_dp(l.dp), m.set_tp(l.tp), m.set_pp(l.pp), m.set_cp(l.cp);
  m.set_virtual_stages(l.virtual_stages);
  m.set_zero_stage(l.zero_stage);
  m.set_sequence_parallel(l.sequence_parallel);
  m.set_micro_batch(l.micro_batch);
  m.set_recompute(l.recompute);
  return m;
}

}  // namespace gantry::coordinator::placement
