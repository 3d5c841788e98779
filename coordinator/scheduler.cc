// The scheduler (scheduler.h): decide, commit, send.
#include "coordinator/scheduler.h"

#include <glog/logging.h>

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "coordinator/job_state.h"
#include "coordinator/placement.h"
#include "coordinator/preemption.h"

namespace gantry::coordinator {

Scheduler::Scheduler(Store* store, Membership* members, SpecCache* specs, Watchers* watchers,
                     metrics::Registry* registry, Host* host, Options options, int64_t started_ms)
    : store_(store),
      members_(members),
      specs_(specs),
      watchers_(watchers),
      registry_(registry),
      host_(host),
      options_(options),
      started_ms_(started_ms),
      auto_placer_(options.planner_cluster) {}

bool Scheduler::Due(int64_t now_ms) {
  if (!grace_over_ && now_ms - started_ms_ >= options_.placement_grace_ms) {
    grace_over_ = true;
    return true;  // no shard server came: place what waited, without one
  }
  return timed_wait_ && now_ms - last_pass_ms_ >= 1000;
}

void Scheduler::Pass(int64_t now) {
  last_pass_ms_ = now;
  timed_wait_ = false;
  const std::vector<std::string> shard_addrs = members_->LiveShardAddresses(now);
  if (shard_addrs.empty() && now - started_ms_ < options_.placement_grace_ms) return;  // Due() says when
  ResolveQueued();
  // This pass's placements: decided first, written together (one WAL sync however many),
  // then applied to the workers and sent.
  std::vector<Store::Update> updates;
  const std::vector<Placement> placements = Decide(shard_addrs, now, &updates);
  if (placements.empty()) return;
  // Durable before any worker hears of it: a coordinator that died after sending would
  // otherwise place the job again at the same generation.
  if (auto s = store_->Commit(&updates); !s.ok()) {
    LOG(WARNING) << "placing " << placements.size() << " jobs: " << s << "; they stay queued";
    timed_wait_ = true;
    return;
  }
  for (const auto& u : updates) watchers_->Notify(u.job.id());
  Send(placements, shard_addrs, now);
}

void Scheduler::ResolveQueued() {
  // A lookup of stored steps serves one placement of a queued job: the others' go.
  for (auto it = stored_.begin(); it != stored_.end();) it = store_->IsQueued(it->first) ? std::next(it) : stored_.erase(it);
  for (auto it = auto_waits_.begin(); it != auto_waits_.end();) {
    if (store_->IsQueued(it->first)) {
      ++it;
    } else {
      auto_placer_.Forget(it->first);
      it = auto_waits_.erase(it);
    }
  }
  // Queued jobs whose spec this coordinator has not read yet (stored by an earlier one) join
  // the queue of their device kind; one whose stored spec no longer parses (it did when it
  // was accepted: the record is damaged) fails.
  for (const auto& id : store_->Unresolved()) {
    auto job = store_->GetJob(id);
    if (!job.ok() || specs_->Of(*job)) continue;
    job->set_reason("its stored job spec no longer parses (the coordinator's log has the error)");
    if (!host_->Transition(*job, v1::FAILED, "").ok()) timed_wait_ = true;
  }
}

std::shared_ptr<const TeamQuotas> Scheduler::Quotas() const {
  auto q = options_.quotas ? options_.quotas() : nullptr;
  return q && !q->empty() ? q : nullptr;
}

bool Scheduler::QuotasInForce() const { return Quotas() != nullptr; }

quota::Usage Scheduler::PlacedUse() const {
  // From the store's index: no record is read unless its device kind is not known yet.
  quota::Usage usage;
  for (const auto& [job, device] : store_->PlacedBriefs()) {
    std::string kind = device;
    if (kind.empty()) {
      auto full = store_->GetJob(job->id());
      const auto spec = full.ok() ? specs_->Of(*full) : nullptr;
      kind = spec ? spec->resources.device : "cpu";
    }
    quota::Use& u = usage[job->team()];
    u.slots[kind] += job->world_size();
    ++u.jobs;
  }
  return usage;
}

std::string Scheduler::HeldFor(const QuotaHolds& holds, const Store& store, const std::string& job_id) {
  const auto at = store.QueuedAt(job_id);  // (device kind, team) of a queued job
  if (!at) return std::string();
  auto it = holds.find(*at);
  return it == holds.end() ? std::string() : it->second;
}

std::string Scheduler::QuotaHold(const std::string& job_id) const { return HeldFor(*quota_holds_, *store_, job_id); }

std::vector<Scheduler::Placement> Scheduler::Decide(const std::vector<std::string>& shard_addrs, int64_t now,
                                                    std::vector<Store::Update>* updates) {
  if (const auto quotas = Quotas()) {
    QuotaHolds holds;
    auto placements = DecideWithQuotas(*quotas, shard_addrs, now, updates, &holds);
    quota_holds_ = std::make_shared<const QuotaHolds>(std::move(holds));
    return placements;
  }
  if (!quota_holds_->empty()) quota_holds_ = std::make_shared<const QuotaHolds>();
  std::vector<Placement> placements;
  std::set<const Member*> taken;  // a worker chosen for one placement is not offered to the next
  // First come, first served within a device kind (resources.device): a job that cannot be
  // placed yet holds back the later ones of its kind, not those of other kinds, whose
  // workers it could not use. Each kind's queue is walked from its head until one holds.
  for (const std::string& device : store_->QueuedDevices()) {
    std::optional<placement::QueueKey> at;
    while ((at = store_->NextQueued(device, at))) {
      auto job = store_->GetJob(at->id);
      if (!job.ok()) continue;
      const auto spec = specs_->Of(*job);
      if (!spec || spec->resources.device != device) continue;  // resolved: not expected
      Placement p;
      const v1::Job waiting = *job;
      const Outcome o = PlaceOne(*std::move(job), *spec, shard_addrs, now, taken, &p, updates);
      if (o == Outcome::kWaits) {
        if (wanted_ > 0) MaybePreempt(waiting, device, wanted_, taken);
        break;
      }
      if (o == Outcome::kSkipped) continue;
      for (const auto& [w, local] : p.chosen) taken.insert(w);
      placements.push_back(std::move(p));
    }
  }
  return placements;
}

std::vector<Scheduler::Placement> Scheduler::DecideWithQuotas(const TeamQuotas& quotas,
                                                              const std::vector<std::string>& shard_addrs, int64_t now,
                                                              std::vector<Store::Update>* updates,
                                                              QuotaHolds* holds) {
  std::vector<Placement> placements;
  std::set<const Member*> taken;
  quota::Usage usage = PlacedUse();
  for (const std::string& device : store_->QueuedDevices()) {
    // The kind's queue in the fair share's order (quota::FairShareQueue, which queue_position
    // reports too), read from the store's index a team's next job at a time: the walk stops
    // at the first job that waits for workers, and a pass of a busy cluster (one per
    // submission or end) would otherwise copy thousands of queued jobs to place a few. A job's
    // record is read when its turn comes.
    quota::FairShareQueue queue(
        quotas, std::move(usage), device, store_->QueuedTeams(device),
        [&](const std::string& team,
            const std::optional<placement::QueueKey>& after) -> std::optional<quota::FairShareQueue::Job> {
          auto next = store_->NextQueuedOfTeam(device, team, after);
          if (!next) return std::nullopt;
          return quota::FairShareQueue::Job{next->first, team, next->second->world_size()};
        });
    while (const std::optional<quota::FairShareQueue::Job> head = queue.Next()) {
      const std::string next = head->team, id = head->key.id;
      auto job = store_->GetJob(id);
      if (!job.ok()) continue;
      const auto spec_ptr = specs_->Of(*job);
      if (!spec_ptr || spec_ptr->resources.device != device) continue;  // resolved: not expected
      const jobspec::JobSpec& spec = *spec_ptr;
      const quota::Usage& used = queue.usage();
      // The cap and the quota for the fewest ranks it can start on first; then what it would take.
      const bool borrow = !job->not_preemptible();  // borrowed slots are reclaimed by preemption
      if (std::string why = quota::HoldReason(quotas, used, next, device, spec.MinWorld(), borrow); !why.empty()) {
        (*holds)[{device, next}] = why;  // it, and the jobs of its team behind it at this kind
        queue.Hold(next);
        continue;
      }
      Placement p;
      const v1::Job waiting = *job;
      const Outcome o = PlaceOne(*std::move(job), spec, shard_addrs, now, taken, &p, updates,
                                 quota::Room(quotas, used, next, device, borrow));
      if (o == Outcome::kWaits) {  // workers: the jobs of its kind behind it wait with it
        if (wanted_ > 0) MaybePreempt(waiting, device, wanted_, taken, &quotas, &used);
        break;
      }
      if (o == Outcome::kSkipped) continue;
      if (o == Outcome::kHeld) {
        std::string why = quota::HoldReason(quotas, used, next, device, p.job.world_size(), borrow);
        if (why.empty()) {
          why = absl::StrCat("team ", next, " near its quota: ", quota::Room(quotas, used, next, device, borrow), " ",
                             quota::SlotsName(device, 2), " left, fewer than its layout takes");
        }
        (*holds)[{device, next}] = why;
        queue.Hold(next);
        continue;
      }
      // Ranks beyond the team's nominal quota run on what its cohort lends: marked, for the
      // preemption that reclaims them.
      if (const int64_t borrowed = quota::BorrowedBy(quotas, used, next, device, p.job.world_size()); borrowed > 0) {
        p.job.set_borrowed_slots(static_cast<int32_t>(borrowed));
        Store::Update& u = updates->back();
        u.job.set_borrowed_slots(p.job.borrowed_slots());
        v1::JobEvent& e = u.events.emplace_back();
        e.set_job_id(id);
        e.set_time_unix_ms(p.job.update_time_unix_ms());
        e.set_message(absl::StrCat(borrowed, " of its ", p.job.world_size(), " ", quota::SlotsName(device, p.job.world_size()),
                                   " borrowed from cohort ",
                                   quotas.at(next).cohort, " (beyond team ", next, "'s quota)"));
      }
      for (const auto& [w, local] : p.chosen) taken.insert(w);
      queue.Placed(next, p.job.world_size());
      placements.push_back(std::move(p));
    }
    usage = queue.TakeUsage();
  }
  return placements;
}

std::vector<quota::FairShareQueue::Job> Scheduler::FairShareJobs(const std::string& device) const {
  // From the store's index (brief records): no record is read.
  std::vector<quota::FairShareQueue::Job> jobs;
  for (auto& [key, brief] : store_->QueuedBriefs(device)) jobs.push_back({key, brief->team(), brief->world_size()});
  return jobs;
}

std::map<std::string, std::vector<quota::FairShareQueue::Job>> Scheduler::FairShareQueues() const {
  std::map<std::string, std::vector<quota::FairShareQueue::Job>> queues;
  for (const std::string& device : store_->QueuedDevices()) queues[device] = FairShareJobs(device);
  return queues;
}

std::map<std::string, std::pair<int64_t, std::string>> Scheduler::QueuePositions() const {
  const auto quotas = Quotas();
  if (!quotas) return store_->QueuePositions();  // first come, first served within a priority
  return quota::FairSharePositions(*quotas, PlacedUse(), FairShareQueues());
}

std::pair<int64_t, std::string> Scheduler::QueuePosition(const std::string& job_id) const {
  const auto quotas = Quotas();
  if (!quotas) return store_->QueuePosition(job_id);  // a walk to the job alone
  return quota::FairSharePosition(*quotas, PlacedUse(), FairShareQueues(), job_id);
}

Scheduler::Outcome Scheduler::PlaceOne(v1::Job job, const jobspec::JobSpec& spec,
                                       const std::vector<std::string>& shard_addrs, int64_t now,
                                       const std::set<const Member*>& taken, Placement* p,
                                       std::vector<Store::Update>* updates, int64_t room) {
  const std::string& device = spec.resources.device;
  wanted_ = 0;
  if (job.state() == v1::RESTARTING) {
    if (now - job.failure_time_unix_ms() < placement::RestartBackoffMs(job.restarts_in_a_row()) ||
        !placement::MissingCheckpointServers(job, shard_addrs, now, options_.checkpoint_server_wait_ms).empty()) {
      timed_wait_ = true;
      return Outcome::kWaits;
    }
  }
  // What the shard servers hold of it, before it is placed again or from another job's
  // checkpoint: listed off the lock, and the lookup's end places it.
  if (!StoredStepsKnown(job, spec, shard_addrs)) return Outcome::kWaits;
  // Gang placement: all ranks or none. An elastic job takes the largest dp the idle workers
  // allow (at least its smallest); a parallel: auto job the workers and layout AutoPlacer
  // chooses, its spec from here on the one with that layout.
  const std::vector<Member*> idle = members_->Idle(device, taken);
  std::optional<AutoPlacer::Decision> chose;
  if (spec.auto_layout()) {
    std::vector<AutoPlacer::Worker> workers;
    for (const Member* w : idle) {
      const v1::Resources& r = w->info.resources();
      workers.push_back({w->info.id(), r.host(), placement::SlotsOf(r), r.device_kind(), r.device_name(),
                         r.device_memory_bytes() > 0 ? r.device_memory_bytes() : r.memory_bytes()});
    }
    chose = auto_placer_.Decide(job.id(), spec, workers,
                                members_->Count(device, taken).alive_slots);
    if (chose->what != AutoPlacer::Decision::What::kPlace) auto_waits_[job.id()] = chose->why;
    if (chose->what == AutoPlacer::Decision::What::kWait) return Outcome::kWaits;
    if (chose->what == AutoPlacer::Decision::What::kFail) {
      job.set_reason(chose->why);
      if (!host_->Transition(job, v1::FAILED, job.reason()).ok()) timed_wait_ = true;  // it stays queued
      return Outcome::kSkipped;
    }
  }
  const jobspec::JobSpec& placed_spec = chose ? chose->spec : spec;
  const int tp = placed_spec.parallel.tp, pp = placed_spec.parallel.pp;
  const int idle_slots_n = members_->Count(device, taken).idle_slots;
  // An elastic job takes no more than its team's quota leaves.
  const int elastic_slots = room >= 0 ? static_cast<int>(std::min<int64_t>(idle_slots_n, room)) : idle_slots_n;
  const int world = chose                    ? placed_spec.world_size()
                    : spec.elastic.enabled() ? spec.WorldFor(elastic_slots)
                                             : spec.world_size();
  if (world == 0 && spec.elastic.enabled() && !chose && spec.WorldFor(idle_slots_n) > 0) {
    p->job.set_world_size(spec.MinWorld());
    return Outcome::kHeld;  // the workers are there; the quota is not
  }
  if (world == 0) {  // not even its smallest dp: it waits (first come, first served)
    wanted_ = spec.MinWorld();
    return Outcome::kWaits;
  }
  if (room >= 0 && world > room) {
    p->job.set_world_size(world);  // what it would take, for the hold's reason
    return Outcome::kHeld;
  }
  std::vector<placement::IdleWorker> idle_slots;
  for (const Member* w : idle) idle_slots.push_back({w->info.resources().host(), placement::SlotsOf(w->info.resources())});
  for (const auto& slot : chose ? chose->slots : placement::ChooseSlots(idle_slots, world, tp)) {
    p->chosen.emplace_back(idle[slot.worker], slot.local);
    ++p->local_world[idle[slot.worker]];
  }
  if (p->chosen.empty()) {  // later jobs of its kind wait
    wanted_ = world;
    return Outcome::kWaits;
  }
  // A parameter-server job waits for a shard server, as for workers.
  if (shard_addrs.empty() && spec.optimizer.placement == "shardserver") return Outcome::kWaits;
  p->param_ranges = placement::ParamRanges(spec, shard_addrs,
                                           [&](const std::string& server) { return members_->DataAddressOf(server); });
  // Where the ranks start: decided here, once, from the committed checkpoints.
  auto resume = ResumePoint(job, spec);
  if (!resume.ok()) {
    job.set_reason(std::string(resume.status().message()));
    if (!host_->Transition(job, v1::FAILED, job.reason()).ok()) {
      timed_wait_ = true;  // it stays queued
    } else {
      LOG(WARNING) << "job " << job.id() << " failed: " << job.reason();
    }
    return Outcome::kSkipped;
  }
  p->resume = *resume;
  // The ranks' layout, in typed fields (Assignment.layout): an auto job's planner's choice, an
  // elastic job's dp; the spec they read is the user's text, never rewritten.
  p->layout = jobspec::LayoutOf(placed_spec);
  p->layout.dp = world / (tp * pp * placed_spec.parallel.cp);
  job.set_generation(job.generation() + 1);
  job.set_world_size(world);
  job.clear_borrowed_slots();  // DecideWithQuotas marks what this placement borrows
  job.clear_workers();
  for (const auto& [w, local] : p->chosen) job.add_workers(w->info.id());
  for (size_t r = 0; r < p->chosen.size(); ++r) {
    const auto& [w, local] = p->chosen[r];
    const bool gpus = !placement::Offers(w->info.resources(), "cpu");
    absl::StrAppend(&p->where, r ? ", " : "", p->chosen.size() > 1 ? absl::StrCat("rank ", r, " ") : "", w->info.id(),
                    " (", w->info.resources().host(), gpus ? absl::StrCat(" gpu ", local) : std::string(), ")");
  }
  if (chose) job.set_layout(chose->event);
  auto events = PrepareTransition(job, v1::SCHEDULED, absl::StrCat("placed: ", p->where));
  if (!events.ok()) return Outcome::kSkipped;  // queued jobs may be scheduled: not expected
  if (chose) {  // the layout and its prediction, before the placement's own events
    v1::JobEvent e;
    e.set_job_id(job.id());
    e.set_time_unix_ms(job.update_time_unix_ms());
    e.set_message(chose->event);
    events->insert(events->begin(), std::move(e));
    auto_waits_.erase(job.id());
    auto_placer_.Forget(job.id());  // placed again later: chosen again, for the workers then
  }
  updates->push_back({job, *std::move(events)});
  p->job = std::move(job);
  return Outcome::kPlaced;
}

void Scheduler::MaybePreempt(const v1::Job& job, const std::string& device, int64_t need,
                             const std::set<const Member*>& taken, const TeamQuotas* quotas,
                             const quota::Usage* usage) {
  // Within its team's own quota, the job may take back what its cohort's other teams borrowed.
  const std::string cohort =
      quotas != nullptr ? quota::ReclaimCohort(*quotas, *usage, job.team(), device, need) : std::string();
  int64_t coming = 0;  // slots of jobs being preempted now: the head of the queue gets them
  std::vector<preemption::Candidate> candidates;
  std::set<std::string> reclaimed;  // candidates for their borrowed slots rather than their priority
  for (const auto& [brief, kind] : store_->PlacedBriefs()) {
    if (kind != device) continue;
    if (brief->has_preemption()) {
      coming += brief->world_size();
      continue;
    }
    // Running (a job just placed has not started: it is left to start), and of lower priority
    // or on slots borrowed from the job's team's cohort.
    if (brief->state() != v1::RUNNING || brief->not_preemptible()) continue;
    const bool lower = brief->priority() < job.priority();
    bool reclaim = false;
    if (!cohort.empty() && brief->borrowed_slots() > 0 && brief->team() != job.team()) {
      auto t = quotas->find(brief->team());
      reclaim = t != quotas->end() && t->second.cohort == cohort;
    }
    if (!lower && !reclaim) continue;
    if (!lower) reclaimed.insert(brief->id());
    candidates.push_back({brief->id(), brief->team(), brief->priority(), brief->world_size(),
                          std::max<int64_t>(0, brief->steps_done() - brief->checkpoint_step()),
                          brief->submit_time_unix_ms()});
  }
  if (candidates.empty()) return;
  const int64_t idle = members_->Count(device, taken).idle_slots;
  const std::vector<preemption::Candidate> victims =
      preemption::ChooseVictims(candidates, need, idle + coming, [&](const preemption::Candidate& c) {
        auto full = store_->GetJob(c.job_id);
        const auto spec = full.ok() ? specs_->Of(*full) : nullptr;
        return spec != nullptr && spec->scheduling.preemptible;
      });
  for (const preemption::Candidate& v : victims) {
    auto victim = store_->GetJob(v.job_id);
    if (!victim.ok() || victim->state() != v1::RUNNING) continue;
    const std::string reason =
        reclaimed.count(v.job_id)
            ? absl::StrCat("job ", job.id(), " of team ", job.team(), " needs ", need, " ",
                           quota::SlotsName(device, need), " within its team's quota and ", idle, " ",
                           idle == 1 ? "is" : "are", " idle: cohort ", cohort, " reclaims the ",
                           victim->borrowed_slots(), " team ", victim->team(), " borrowed")
            : absl::StrCat("job ", job.id(), " (priority ", job.priority(), " over ", victim->priority(), ") needs ",
                           need, " ", quota::SlotsName(device, need), " and ", idle, " ", idle == 1 ? "is" : "are",
                           " idle");
    if (absl::Status s = host_->Preempt(*victim, job, reason); !s.ok()) {
      LOG(WARNING) << "preempting " << v.job_id << " for " << job.id() << ": " << s;
      timed_wait_ = true;  // tried again at the next due pass
    }
  }
}

void Scheduler::Send(const std::vector<Placement>& placements, const std::vector<std::string>& shard_addrs,
                     int64_t now) {
  auto& latency = registry_->GetHistogram("gantry_coordinator_scheduling_latency_seconds",
                                          "Submit (or re-queue) to placement.", metrics::ExponentialBuckets(0.01, 4, 8));
  for (auto& p : placements) {
    const v1::Job& job = p.job;
    latency.Observe(static_cast<double>(now - job.submit_time_unix_ms()) / 1000.0);
    const int world = static_cast<int>(p.chosen.size());
    for (size_t r = 0; r < p.chosen.size(); ++r) {
      const auto& [w, local] = p.chosen[r];
      w->Assign(job.id(), job.generation(), static_cast<int>(r));
      v1::CoordinatorMessage m;
      v1::Assignment* a = m.mutable_assign();
      a->set_job_id(job.id());
      a->set_generation(job.generation());
      a->set_spec_yaml(job.spec_yaml());  // as submitted: the ranks apply the layout to it
      a->set_resume_job_id(p.resume.first);
      a->set_resume_step(p.resume.second);
      a->set_rank(static_cast<int>(r));
      a->set_world_size(world);
      *a->mutable_layout() = placement::LayoutMessage(p.layout);
      a->set_local_rank(local);
      a->set_local_world(p.local_world.at(w));
      for (const auto& s : shard_addrs) a->add_shard_servers(s);
      a->mutable_param_ranges()->Assign(p.param_ranges.begin(), p.param_ranges.end());
      w->session->Send(m);
    }
    LOG(INFO) << "job " << job.id() << " generation " << job.generation() << " placed: " << p.where;
  }
}

bool Scheduler::StoredStepsKnown(const v1::Job& job, const jobspec::JobSpec& spec,
                                 const std::vector<std::string>& servers) {
  if (job.generation() == 0 && spec.checkpoint.resume_from.empty()) return true;  // nothing stored to find
  if (servers.empty()) return true;  // no shard server to ask: the coordinator's record alone
  StoredSteps& st = stored_[job.id()];
  if (st.generation == job.generation()) return st.done;
  st = StoredSteps{job.generation(), false, 0, 0};
  const std::string from = spec.checkpoint.resume_from.substr(0, spec.checkpoint.resume_from.find('@'));
  // A server that cannot be listed may hold the newest checkpoint: then nothing is
  // concluded, and the lookup runs again at the next due pass (a dead server leaves the live
  // set after shard_timeout_ms).
  std::vector<std::string> jobs = {job.id()};
  if (!from.empty()) jobs.push_back(from);
  host_->ListStoredSteps(job.id(), job.generation(), servers, std::move(jobs));
  return false;
}

void Scheduler::StoredStepsListed(const std::string& job_id, int64_t generation, const std::vector<int64_t>& newest,
                                  const std::vector<std::string>& unreachable) {
  auto it = stored_.find(job_id);
  // Not queued any more, or a later placement's lookup replaced it.
  if (it == stored_.end() || it->second.generation != generation) return;
  StoredSteps& s = it->second;
  if (!unreachable.empty()) {
    LOG(WARNING) << "job " << job_id << ": listing its checkpoints before placing it: " << unreachable.front()
                 << "; trying again";
    s.generation = -1;  // the next due pass starts a new lookup
    timed_wait_ = true;
    return;
  }
  s.own = newest[0];
  s.from = newest.size() > 1 ? newest[1] : 0;
  s.done = true;
}

absl::StatusOr<std::pair<std::string, int64_t>> Scheduler::ResumePoint(const v1::Job& job,
                                                                       const jobspec::JobSpec& spec) {
  const auto st = stored_.find(job.id());
  const bool listed = st != stored_.end() && st->second.done && st->second.generation == job.generation();
  placement::Stored own{job.checkpoint_step(), listed ? st->second.own : 0}, from{0, listed ? st->second.from : 0};
  const std::string& resume_from = spec.checkpoint.resume_from;
  if (!resume_from.empty() && resume_from.find('@') == std::string::npos) {
    auto src = store_->GetJob(resume_from);
    if (src.ok()) from.recorded = src->checkpoint_step();
  }
  return placement::ResumePoint(job, spec, own, from);
}

std::string Scheduler::AutoWaitReason(const std::string& job_id) const {
  auto it = auto_waits_.find(job_id);
  return it == auto_waits_.end() ? std::string() : it->second;
}

int Scheduler::GrowTarget(const v1::Job& job, const jobspec::JobSpec& spec) const {
  if (!spec.elastic.enabled()) return 0;
  // Queued jobs of its device kind come first: growing is only for workers nobody waits for
  // (a queued job whose spec was not read yet may be of its kind).
  if (store_->AnyQueued(spec.resources.device) || !store_->Unresolved().empty()) return 0;
  int64_t more = members_->Count(spec.resources.device).idle_slots;
  if (const auto quotas = Quotas()) {  // no more than its team's quota leaves
    const int64_t room = quota::Room(*quotas, PlacedUse(), job.team(), spec.resources.device);
    if (room >= 0) more = std::min(more, room);
  }
  const int target = spec.WorldFor(job.world_size() + static_cast<int>(more));
  return target > job.world_size() ? target : 0;
}

}  // namespace gantry::coordinator
