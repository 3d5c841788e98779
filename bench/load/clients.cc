#include "bench/load/clients.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "bench/load/fleet.h"
#include "bench/load/own_channel.h"
#include "bench/load/stand_in.h"

namespace gantry::load {

Clients::Clients(const ControlPlaneOptions& o, const std::string& coordinator, Recorder* rec, Fleet* fleet,
                 const Users* users)
    : o_(o), rec_(rec), fleet_(fleet),
      // A user's calls on channels without the cluster token (users: their own on each call).
      submit_stub_(v1::Coordinator::NewStub(users ? UserChannel(coordinator) : OwnChannel(coordinator))),
      list_stub_(v1::Coordinator::NewStub(users ? UserChannel(coordinator) : OwnChannel(coordinator))),
      list_full_stub_(v1::Coordinator::NewStub(OwnChannel(coordinator, 1 << 30))),
      get_stub_(v1::Coordinator::NewStub(users ? UserChannel(coordinator) : OwnChannel(coordinator))),
      watch_stub_(v1::Coordinator::NewStub(OwnChannel(coordinator))),
      users_(users) {
  submit_time_.resize(static_cast<size_t>(o.jobs));
  job_of_.resize(static_cast<size_t>(o.jobs));
}

void Clients::Start() {
  threads_.emplace_back([this] { Submitter(); });
  threads_.emplace_back([this] { Probe(o_.list_jobs_period_s, [this](Clock::time_point due) { ListJobs(due, true); }); });
  threads_.emplace_back(
      [this] { Probe(o_.list_jobs_full_period_s, [this](Clock::time_point due) { ListJobs(due, false); }); });
  threads_.emplace_back([this] { Probe(o_.get_job_period_s, [this](Clock::time_point due) { GetJob(due); }); });
  threads_.emplace_back([this] { Probe(o_.list_workers_period_s, [this](Clock::time_point due) { ListWorkers(due); }); });
  for (int i = 0; i < o_.watchers; ++i) threads_.emplace_back([this, i] { Watcher(i); });
}

void Clients::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return;
    stop_ = true;
    for (auto* c : watch_ctx_) c->TryCancel();
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  threads_.clear();
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return in_flight_ == 0; });  // every call has a deadline
}

void Clients::Submitter() {
  auto start = Clock::now();
  const auto period = std::chrono::duration<double>(1.0 / o_.submit_rate);
  for (int64_t k = 0;; ++k) {
    const auto due = start + std::chrono::duration_cast<Clock::duration>(period * static_cast<double>(k));
    int i = -1;
    {
      std::unique_lock<std::mutex> l(mu_);
      if (cv_.wait_until(l, due, [&] { return stop_; })) return;  // pacing: the call's time, or the stop
      if (next_ < o_.jobs) {
        i = next_++;
      } else if (retry_ && !to_retry_.empty()) {
        i = to_retry_.front();
        to_retry_.pop_front();
      } else {
        // All submitted: wait for a spec to submit again (a refusal during the restart).
        cv_.wait(l, [&] { return stop_ || (retry_ && !to_retry_.empty()); });
        if (stop_) return;
        start = Clock::now();
        k = -1;
        continue;
      }
      submit_time_[static_cast<size_t>(i)] = due;
    }
    auto* c = new Call<v1::SubmitJobRequest, v1::SubmitJobResponse>;
    c->due = due;
    c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    c->req.set_spec_yaml(JobSpec(i, o_));
    As(&c->ctx, i);  // spec i by user i % users
    Begin();
    submit_stub_->async()->SubmitJob(&c->ctx, &c->req, &c->resp, [this, c, i](grpc::Status s) {
      const double secs = Seconds(Clock::now() - c->due);
      if (s.ok()) {
        rec_->Add("SubmitJob", secs);
        std::lock_guard<std::mutex> l(mu_);
        if (users_ != nullptr) user_of_[c->resp.job_id()] = i % static_cast<int>(users_->tokens.size());
        if (!job_of_[static_cast<size_t>(i)].empty()) {
          Violation(absl::StrCat("spec load-", i, " accepted twice: ", job_of_[static_cast<size_t>(i)], " and ",
                                 c->resp.job_id()));
        }
        if (!ids_.insert(c->resp.job_id()).second) {
          Violation(absl::StrCat("SubmitJob answered job id ", c->resp.job_id(), " twice"));
        }
        job_of_[static_cast<size_t>(i)] = c->resp.job_id();
        ++acked_;
      } else {
        rec_->Error("SubmitJob", s.error_message());
        std::lock_guard<std::mutex> l(mu_);
        // UNAVAILABLE: the call reached no coordinator, no job was made. Anything else (a
        // deadline) may have made one, and submitting again would make a second.
        if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
          to_retry_.push_back(i);
        } else {
          Violation(absl::StrCat("SubmitJob of load-", i, ": ", s.error_message()));
        }
      }
      delete c;
      End();
      cv_.notify_all();
    });
  }
}

void Clients::Probe(double period_s, const std::function<void(Clock::time_point)>& call) {
  if (period_s <= 0) return;
  const auto start = Clock::now();
  const auto period = std::chrono::duration<double>(period_s);
  for (int64_t k = 1;; ++k) {
    const auto due = start + std::chrono::duration_cast<Clock::duration>(period * static_cast<double>(k));
    {
      std::unique_lock<std::mutex> l(mu_);
      if (cv_.wait_until(l, due, [&] { return stop_; })) return;
    }
    call(due);
  }
}

void Clients::ListJobs(Clock::time_point due, bool brief) {
  auto* c = new Call<v1::ListJobsRequest, v1::ListJobsResponse>;
  c->due = due;
  c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  c->req.set_brief(brief);
  // One page, as the CLI asks: `gantry jobs` its newest 50, `-o json` pages of 1000 full records.
  c->req.set_page_size(brief ? 50 : 1000);
  if (brief) {  // with users: each in turn, seeing its own and its team's jobs
    std::lock_guard<std::mutex> l(mu_);
    As(&c->ctx, list_turn_++);
  }
  Begin();
  (brief ? list_stub_ : list_full_stub_)->async()->ListJobs(&c->ctx, &c->req, &c->resp, [this, c, brief](grpc::Status s) {
    const double secs = Seconds(Clock::now() - c->due);
    const std::string method = brief ? "ListJobs" : "ListJobs (full)";
    if (s.ok()) {
      rec_->Add(method, secs);
      const int64_t bytes = static_cast<int64_t>(c->resp.ByteSizeLong());
      for (const auto& j : c->resp.jobs()) {
        if (j.state() == v1::SUCCEEDED) fleet_->SawSucceeded(j.id());
      }
      std::lock_guard<std::mutex> l(mu_);
      int64_t& most = brief ? list_bytes_ : list_full_bytes_;
      most = std::max(most, bytes);
    } else {
      rec_->Error(method, s.error_message());
    }
    delete c;
    End();
  });
}

std::string Clients::RandomJob(std::mt19937_64& rng) {
  std::lock_guard<std::mutex> l(mu_);
  if (acked_ == 0) return "";
  // Among the most recent specs submitted: those are the ones still moving.
  for (int tries = 0; tries < 20; ++tries) {
    const int hi = next_;
    const int lo = std::max(0, hi - 2 * std::max(1, o_.workers));
    const int i = lo + static_cast<int>(rng() % static_cast<uint64_t>(std::max(1, hi - lo)));
    if (i < o_.jobs && !job_of_[static_cast<size_t>(i)].empty()) return job_of_[static_cast<size_t>(i)];
  }
  return *ids_.begin();
}

void Clients::GetJob(Clock::time_point due) {
  const std::string job = RandomJob(get_rng_);
  if (job.empty()) return;
  auto* c = new Call<v1::GetJobRequest, v1::Job>;
  c->due = due;
  c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  c->req.set_job_id(job);
  if (users_ != nullptr) {  // as its submitter
    std::lock_guard<std::mutex> l(mu_);
    auto u = user_of_.find(job);
    As(&c->ctx, u == user_of_.end() ? 0 : u->second);
  }
  Begin();
  get_stub_->async()->GetJob(&c->ctx, &c->req, &c->resp, [this, c](grpc::Status s) {
    if (s.ok()) {
      rec_->Add("GetJob", Seconds(Clock::now() - c->due));
      if (c->resp.state() == v1::SUCCEEDED) fleet_->SawSucceeded(c->resp.id());
    } else {
      rec_->Error("GetJob", s.error_message());
    }
    delete c;
    End();
  });
}

void Clients::ListWorkers(Clock::time_point due) {
  auto* c = new Call<v1::ListWorkersRequest, v1::ListWorkersResponse>;
  c->due = due;
  c->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  As(&c->ctx, 0);  // get_stub_'s channel: with users, a user's token
  Begin();
  get_stub_->async()->ListWorkers(&c->ctx, &c->req, &c->resp, [this, c](grpc::Status s) {
    if (s.ok()) {
      rec_->Add("ListWorkers", Seconds(Clock::now() - c->due));
    } else {
      rec_->Error("ListWorkers", s.error_message());
    }
    delete c;
    End();
  });
}

void Clients::Watcher(int n) {
  std::mt19937_64 rng(1000 + n);
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (stop_) return;
      if (acked_ == 0) {
        cv_.wait_for(l, std::chrono::milliseconds(100));  // wakes on a submit's answer, or the stop
        continue;
      }
    }
    const std::string job = RandomJob(rng);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return;
      watch_ctx_.insert(&ctx);
    }
    v1::WatchJobRequest req;
    req.set_job_id(job);
    const auto t0 = Clock::now();
    auto reader = watch_stub_->WatchJob(&ctx, req);
    v1::JobEvent e;
    std::vector<v1::JobEvent> events;
    while (reader->Read(&e)) {
      if (events.empty()) rec_->Add("WatchJob (first event)", Seconds(Clock::now() - t0));
      events.push_back(e);
    }
    const grpc::Status s = reader->Finish();
    {
      std::lock_guard<std::mutex> l(mu_);
      watch_ctx_.erase(&ctx);
      if (stop_) return;
    }
    if (!s.ok()) {
      rec_->Error("WatchJob (first event)", s.error_message());
      // The coordinator went away (the restart): this watch proves nothing. Again after a
      // pause, as a person would, rather than in a tight loop while it is down.
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, std::chrono::milliseconds(200), [&] { return stop_; });
      continue;
    }
    std::string bad;
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
    int placed = 0, scheduled = 0, terminal = 0;
    for (size_t k = 0; k < events.size() && bad.empty(); ++k) {
      const auto& ev = events[k];
      if (ev.seq() != static_cast<int64_t>(k) + 1) bad = absl::StrCat("event ", k + 1, " has seq ", ev.seq());
      if (ev.has_message() && ev.message().rfind("placed: ", 0) == 0) ++placed;
      if (!ev.has_state()) continue;
      const v1::JobState to = ev.state();
      if (terminal > 0) bad = absl::StrCat("state ", v1::JobState_Name(to), " after the end");
      if (k == 0 && to != v1::PENDING) bad = "first event is not PENDING";
      if (k > 0 && state == v1::JOB_STATE_UNSPECIFIED) bad = "a state event before PENDING";
      const bool allowed = (state == v1::JOB_STATE_UNSPECIFIED && to == v1::PENDING) ||
                           (state == v1::PENDING && to == v1::SCHEDULED) ||
                           (state == v1::SCHEDULED && (to == v1::RUNNING || to == v1::SUCCEEDED || to == v1::RESTARTING)) ||
                           (state == v1::RUNNING && (to == v1::SUCCEEDED || to == v1::RESTARTING)) ||
                           (state == v1::RESTARTING && to == v1::SCHEDULED) || to == v1::FAILED || to == v1::CANCELLED;
      if (!allowed) bad = absl::StrCat(v1::JobState_Name(state), " -> ", v1::JobState_Name(to));
      scheduled += to == v1::SCHEDULED;
      terminal += to == v1::SUCCEEDED || to == v1::FAILED || to == v1::CANCELLED;
      state = to;
    }
    if (bad.empty() && terminal != 1) bad = absl::StrCat(terminal, " terminal states");
    if (bad.empty() && state != v1::SUCCEEDED) bad = absl::StrCat("ended ", v1::JobState_Name(state));
    if (bad.empty() && placed != scheduled) bad = absl::StrCat(placed, " placements for ", scheduled, " SCHEDULED states");
    if (state == v1::SUCCEEDED) fleet_->SawSucceeded(job);
    std::unique_lock<std::mutex> l(mu_);
    ++watched_;
    if (!bad.empty()) Violation(absl::StrCat("WatchJob ", job, ": ", bad));
    // A person's pace between two watches (a job that ended long ago replays at once).
    cv_.wait_for(l, std::chrono::milliseconds(50), [&] { return stop_; });
  }
}

}  // namespace gantry::load
