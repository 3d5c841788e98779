// Membership (membership.h): the workers and shard servers the coordinator knows.
#include "coordinator/membership.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "coordinator/placement.h"

namespace gantry::coordinator {

void Member::Free() {
  info.set_state("idle");
  info.clear_job_id();
  info.clear_ranks();
  running.clear();
}

void Member::Assign(const std::string& job_id, int64_t gen, int rank) {
  info.set_state("busy");
  info.set_job_id(job_id);
  info.add_ranks(rank);
  running.insert(rank);
  generation = gen;
}

Member& Membership::Add(WorkerSession* session, const v1::Resources& resources, int64_t now_ms) {
  const std::string id = absl::StrFormat("w-%06d", next_worker_++);
  Member& m = workers_[id];
  m.info.set_id(id);
  *m.info.mutable_resources() = resources;
  m.info.set_state("idle");
  m.session = session;
  m.live = std::make_shared<Member::Liveness>();
  m.live->last_seen_ms = now_ms;
  {
    std::unique_lock<std::shared_mutex> l(live_mu_);
    live_[id] = m.live;
  }
  UpdateLargest();
  return m;
}

void Membership::Heartbeat(const std::string& id, int64_t now_ms, const v1::Heartbeat* hb) {
  std::shared_ptr<Member::Liveness> live;
  {
    std::shared_lock<std::shared_mutex> l(live_mu_);
    auto it = live_.find(id);
    if (it == live_.end()) return;
    live = it->second;
  }
  live->last_seen_ms = now_ms;
  if (hb == nullptr) return;
  std::lock_guard<std::mutex> l(live->mu);
  live->gpus = hb->gpus();
  if (!hb->job_id().empty()) live->last_hb = *hb;
}

Member* Membership::Find(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

Member* Membership::FindAttached(const std::string& id) {
  Member* m = Find(id);
  return m != nullptr && m->attached() ? m : nullptr;
}

bool Membership::Silent(const Member& m, int64_t now_ms) const {
  return m.attached() && now_ms - m.live->last_seen_ms > options_.worker_timeout_ms && !m.session->Backlogged();
}

std::vector<std::string> Membership::SilentIds(int64_t now_ms) const {
  std::vector<std::string> silent;
  for (const auto& [id, m] : workers_) {
    if (Silent(m, now_ms)) silent.push_back(id);
  }
  return silent;
}

void Membership::MarkDead(Member& m, int64_t now_ms) {
  m.session = nullptr;
  m.info.set_state("dead");
  m.dead_since_ms = now_ms;
  UpdateLargest();
}

void Membership::ForgetDead(int64_t now_ms) {
  std::vector<std::string> gone;
  for (const auto& [id, m] : workers_) {
    if (!m.attached() && m.dead_since_ms > 0 && now_ms - m.dead_since_ms >= options_.dead_worker_retention_ms) {
      gone.push_back(id);
    }
  }
  if (gone.empty()) return;
  std::unique_lock<std::shared_mutex> l(live_mu_);
  for (const auto& id : gone) {
    workers_.erase(id);
    live_.erase(id);
  }
}

std::vector<v1::Worker> Membership::List() const {
  std::vector<v1::Worker> out;
  out.reserve(workers_.size());
  for (const auto& [id, m] : workers_) {
    out.push_back(m.info);
    if (!m.live) continue;
    out.back().set_last_heartbeat_unix_ms(m.live->last_seen_ms);
    std::lock_guard<std::mutex> l(m.live->mu);
    *out.back().mutable_gpus() = m.live->gpus;
  }
  return out;
}

void Membership::UpdateLargest() {
  int64_t largest = 0;
  for (const auto& [id, m] : workers_) {
    if (m.attached()) largest = std::max<int64_t>(largest, m.info.resources().memory_bytes());
  }
  largest_memory_ = largest;
}

Membership::Counts Membership::Count(const std::string& device, const std::set<const Member*>& taken) const {
  Counts c;
  for (const auto& [id, m] : workers_) {
    if (!m.attached() || taken.count(&m) || !placement::Offers(m.info.resources(), device)) continue;
    ++c.alive;
    c.alive_slots += placement::SlotsOf(m.info.resources());
    if (m.idle()) {
      ++c.idle;
      c.idle_slots += placement::SlotsOf(m.info.resources());
    }
  }
  return c;
}

std::vector<Member*> Membership::Idle(const std::string& device, const std::set<const Member*>& taken) {
  std::vector<Member*> idle;
  for (auto& [id, m] : workers_) {
    if (m.idle() && !taken.count(&m) && placement::Offers(m.info.resources(), device)) idle.push_back(&m);
  }
  return idle;
}

std::pair<int, int> Membership::AliveAndBusy() const {
  int alive = 0, busy = 0;
  for (const auto& [id, m] : workers_) {
    if (!m.attached()) continue;
    ++alive;
    busy += m.info.state() == "busy";
  }
  return {alive, busy};
}

std::map<int, RankProgress> Membership::RankProgressOf(const std::string& job_id, int64_t generation) const {
  std::map<int, RankProgress> ranks;
  for (const auto& [id, m] : workers_) {
    if (!m.attached()) continue;
    std::lock_guard<std::mutex> l(m.live->mu);
    const v1::Heartbeat& hb = m.live->last_hb;
    if (hb.job_id() != job_id || hb.generation() != generation) continue;
    for (const auto& rp : hb.ranks()) ranks[rp.rank()] = {id, rp.collectives_done()};
  }
  return ranks;
}

bool Membership::RegisterShardServer(const v1::RegisterShardServerRequest& r, int64_t now_ms) {
  auto& s = shards_[r.address()];
  // New, or back after it was counted out (a restart): jobs may wait for it.
  const bool fresh = s.address().empty() || now_ms - s.last_heartbeat_unix_ms() > options_.shard_timeout_ms;
  s.set_address(r.address());
  s.set_bytes_stored(r.bytes_stored());
  s.set_data_address(r.data_address());
  s.set_last_heartbeat_unix_ms(now_ms);
  return fresh;
}

bool Membership::CountOutShardServer(const std::string& address) {
  auto it = shards_.find(address);
  if (it == shards_.end() || it->second.last_heartbeat_unix_ms() == 0) return false;
  it->second.set_last_heartbeat_unix_ms(0);
  return true;
}

std::vector<v1::ShardServerInfo> Membership::LiveShardServers(int64_t now_ms) const {
  std::vector<v1::ShardServerInfo> out;
  for (const auto& [a, s] : shards_) {
    if (now_ms - s.last_heartbeat_unix_ms() <= options_.shard_timeout_ms) out.push_back(s);
  }
  return out;
}

std::vector<std::string> Membership::LiveShardAddresses(int64_t now_ms) const {
  std::vector<std::string> out;
  for (const auto& s : LiveShardServers(now_ms)) out.push_back(s.address());
  return out;
}

std::string Membership::DataAddressOf(const std::string& server) const {
  auto it = shards_.find(server);
  return it == shards_.end() ? std::string() : it->second.data_address();
}

}  // namespace gantry::coordinator
