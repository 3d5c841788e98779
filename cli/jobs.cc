// Jobs: submit, jobs, describe, cancel, watch.
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "common/console.h"
#include "common/file_util.h"
#include "common/grpc_util.h"
#include "jobspec/job_spec.h"

namespace gantry::cli {

int Watch(const Options& o, v1::Coordinator::Stub* stub, const std::string& job_id) {
  v1::GetJobRequest gr;
  gr.set_job_id(job_id);
  v1::Job job;
  auto gs = stub->GetJob(Ctx(o).get(), gr, &job);
  if (!gs.ok()) return Fail(gs);
  const bool tty = isatty(STDERR_FILENO);
  grpc::ClientContext ctx;  // no deadline: a watch lasts as long as the job
  v1::WatchJobRequest req;
  req.set_job_id(job_id);
  auto reader = stub->WatchJob(&ctx, req);
  v1::JobEvent e;
  v1::JobState last = v1::JOB_STATE_UNSPECIFIED;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t first_step = -1;
  bool bar = false;
  auto clear = [&] {
    if (bar) std::fputs("\r\033[K", stderr);
    bar = false;
  };
  while (reader->Read(&e)) {
    if (e.has_state()) {
      clear();
      last = e.state();
      std::printf("%s %s %s\n", When(e.time_unix_ms()).c_str(), job_id.c_str(), v1::JobState_Name(e.state()).c_str());
    } else if (!e.message().empty()) {
      clear();
      std::printf("%s %s %s\n", When(e.time_unix_ms()).c_str(), job_id.c_str(), e.message().c_str());
    } else if (e.has_step()) {
      const auto& r = e.step();
      clear();
      if (r.step() == 0) {
        std::printf("val loss %.4f (before training)\n", r.val_loss());
        continue;
      }
      StepLine line{r.step(), job.steps_total(), r.loss(), r.lr(), r.grad_norm(), r.step_seconds(),
                    r.tokens_per_second(), r.compute_seconds(), r.comm_seconds(), r.optimizer_seconds(), r.val_loss()};
      line.loss_scale = r.loss_scale();
      line.skipped = r.skipped();
      line.skipped_steps = r.skipped_steps();
      line.offload_bytes = static_cast<double>(r.offload_bytes());
      if (r.moe_forwards() > 0) {
        line.SetMoe(r.moe_aux(), r.moe_z(), r.moe_dropped(), r.moe_assignments(),
                    {r.moe_tokens_per_expert().begin(), r.moe_tokens_per_expert().end()});
      }
      line.notes.assign(r.notes().begin(), r.notes().end());
      std::printf("%s\n", FormatStepLine(line).c_str());
      if (first_step < 0) first_step = r.step();
      if (tty && job.steps_total() > 0) {
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double done = static_cast<double>(r.step() - first_step + 1);
        const double eta = el / done * static_cast<double>(job.steps_total() - r.step());
        std::fputs(FormatProgressBar(r.step(), job.steps_total(), eta).c_str(), stderr);
        bar = true;
      }
    }
    std::fflush(stdout);
  }
  clear();
  auto st = reader->Finish();
  if (!st.ok()) return Fail(st);
  auto fin = stub->GetJob(Ctx(o).get(), gr, &job);
  if (fin.ok() && !job.reason().empty() && last != v1::SUCCEEDED) std::printf("reason: %s\n", job.reason().c_str());
  return last == v1::SUCCEEDED ? 0 : 1;
}

// submit FILE [--wait]
int SubmitCommand(const Options& o) {
  bool wait = false;
  std::vector<std::string> file;
  CommandFlags f = CommandFlagsFor(o);
  f.Switch("wait", &wait, "then watch the job it queued (exit status as watch's)").Operands(&file, 1, 1);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  auto text = ReadFileToString(file[0]);
  if (!text.ok()) {
    std::fprintf(stderr, "gantry: %s\n", std::string(text.status().message()).c_str());
    return 2;
  }
  // The coordinator's validation, here first (jobspec::ParseJobSpec, as SubmitJob parses it):
  // an invalid spec is refused before any call, printed as the coordinator's refusal of it
  // would be. The coordinator checks again: it trusts no client.
  if (auto spec = jobspec::ParseJobSpec(*text); !spec.ok()) return Fail(ToGrpc(spec.status()));
  auto stub = Connect(o);
  v1::SubmitJobRequest req;
  req.set_spec_yaml(*text);  // as written: the spec the ranks read
  v1::SubmitJobResponse resp;
  auto s = stub->SubmitJob(Ctx(o).get(), req, &resp);
  if (!s.ok()) return Fail(s);
  if (o.output == "json") std::printf("%s\n", Json(resp).c_str());
  else std::printf("%s\n", resp.job_id().c_str());
  std::fflush(stdout);
  return wait ? Watch(o, stub.get(), resp.job_id()) : 0;
}

// jobs [--state S] [--owner NAME] [--team TEAM] [--mine] [--limit N | --all]: the newest N
// (default 50) of the jobs the caller may read, paged from the coordinator; -o json: every job
// (or the newest N with --limit) as one list.
int JobsCommand(const Options& o) {
  std::string state, owner, team;
  bool mine = false;
  int64_t limit = 50;
  bool all_jobs = false;
  CommandFlags f = CommandFlagsFor(o);
  std::vector<std::string> states;  // the proto's, but UNSPECIFIED
  for (int i = 0; i < v1::JobState_descriptor()->value_count(); ++i) {
    if (const int n = v1::JobState_descriptor()->value(i)->number(); n != v1::JOB_STATE_UNSPECIFIED) {
      states.push_back(v1::JobState_Name(static_cast<v1::JobState>(n)));
    }
  }
  f.Choice("state", &state, states, "only the jobs in this state")
      .String("owner", &owner, "NAME", "only the jobs that NAME submitted")
      .String("team", &team, "TEAM", "only the jobs of TEAM")
      .Switch("mine", &mine, "only your own jobs")
      .Int("limit", &limit, "N", "the newest N jobs")
      .Default("50; with -o json, every job")
      .Switch("all", &all_jobs, "every job");
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  v1::ListJobsRequest req;
  if (f.given("state")) {
    v1::JobState st = v1::JOB_STATE_UNSPECIFIED;
    (void)v1::JobState_Parse(state, &st);  // one of the names Choice took
    req.set_state(st);
  }
  if (f.given("limit") && limit < 1) {
    std::fprintf(stderr, "gantry: jobs: --limit '%ld' is not a positive number\n", static_cast<long>(limit));
    return 2;
  }
  for (const auto& [name, value] : {std::pair<const char*, const std::string*>{"owner", &owner}, {"team", &team}}) {
    if (f.given(name) && value->empty()) {
      std::fprintf(stderr, "gantry: jobs: --%s needs a name\n", name);
      return 2;
    }
  }
  req.set_owner(owner);
  req.set_team(team);
  req.set_mine(mine);
  if (all_jobs) {
    limit = 0;  // 0: all
  } else if (!f.given("limit") && o.output == "json") {
    limit = 0;
  }
  auto stub = Connect(o);
  // The table shows no spec: without the spec texts a listing is a twelfth of the bytes. JSON
  // keeps every field.
  req.set_brief(o.output != "json");
  // Page by page (a page holds at most 1000): one list of them all, or the newest `limit`.
  v1::ListJobsResponse all;
  bool more = false;
  do {
    if (limit > 0) req.set_page_size(static_cast<int32_t>(std::min<int64_t>(limit - all.jobs_size(), 1000)));
    v1::ListJobsResponse page;
    auto s = stub->ListJobs(Ctx(o).get(), req, &page);
    if (!s.ok()) return Fail(s);
    for (auto& j : *page.mutable_jobs()) *all.add_jobs() = std::move(j);
    req.set_page_token(page.next_page_token());
    more = !page.next_page_token().empty();
  } while (more && (limit == 0 || all.jobs_size() < limit));
  if (o.output == "json") {
    std::printf("%s\n", Json(all).c_str());
    return 0;
  }
  std::printf("%-10s %-20s %-16s %-13s %-16s %-12s %s\n", "JOB", "NAME", "STATE", "STEP", "OWNER", "TEAM",
              "SUBMITTED");
  for (const auto& j : all.jobs()) {
    std::printf("%-10s %-20s %-16s %-13s %-16s %-12s %s\n", j.id().c_str(), j.name().c_str(), State(j).c_str(),
                absl::StrCat(j.steps_done(), "/", j.steps_total()).c_str(), j.owner().empty() ? "-" : j.owner().c_str(),
                j.team().empty() ? "-" : j.team().c_str(), When(j.submit_time_unix_ms()).c_str());
  }
  if (more) std::fprintf(stderr, "(the newest %d jobs; older ones: --limit N or --all)\n", all.jobs_size());
  return 0;
}

namespace {

// describe JOB, cancel JOB: the job, as the coordinator answers.
int ShowJob(const Options& o, bool cancel) {
  std::vector<std::string> job_id;
  CommandFlags f = CommandFlagsFor(o);
  f.Operands(&job_id, 1, 1);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  auto stub = Connect(o);
  v1::Job job;
  grpc::Status s;
  if (!cancel) {
    v1::GetJobRequest req;
    req.set_job_id(job_id[0]);
    s = stub->GetJob(Ctx(o).get(), req, &job);
  } else {
    v1::CancelJobRequest req;
    req.set_job_id(job_id[0]);
    s = stub->CancelJob(Ctx(o).get(), req, &job);
  }
  if (!s.ok()) return Fail(s);
  if (o.output == "json") {
    std::printf("%s\n", Json(job).c_str());
    return 0;
  }
  std::printf("Job:        %s\nName:       %s\nState:      %s\n", job.id().c_str(), job.name().c_str(), State(job).c_str());
  std::printf("Owner:      %s%s\n", job.owner().empty() ? "-" : job.owner().c_str(),
              job.team().empty() ? "" : absl::StrCat(" (team ", job.team(), ")").c_str());
  const bool ended = job.state() == v1::FAILED || job.state() == v1::CANCELLED || job.state() == v1::PREEMPTED;
  if (!job.reason().empty()) std::printf("%s%s\n", ended ? "Reason:     " : "Last failure: ", job.reason().c_str());
  if (!job.waiting_for().empty()) std::printf("Waiting:    %s\n", job.waiting_for().c_str());
  if (!job.stalled().empty() && job.state() == v1::RUNNING) std::printf("Stalled:    %s\n", job.stalled().c_str());
  if (job.has_preemption()) {
    std::printf("Preempting: %s; checkpoint after step %ld, by %s\n", job.preemption().reason().c_str(),
                static_cast<long>(job.preemption().stop_step()), When(job.preemption().deadline_unix_ms()).c_str());
  }
  std::printf("Priority:   %d\nRestarts:   %d\n", job.priority(), job.restarts());
  if (job.preemptions() > 0) std::printf("Preempted:  %d times\n", job.preemptions());
  // parallel: auto: the layout chosen at the latest placement, and its prediction.
  if (!job.layout().empty()) std::printf("Layout:     %s\n", job.layout().c_str());
  if (job.workers_size() > 0) {
    std::string ranks;
    for (int r = 0; r < job.workers_size(); ++r) absl::StrAppend(&ranks, r ? ", " : "", "rank ", r, " ", job.workers(r));
    std::printf("Workers:    %s\n", ranks.c_str());
  }
  std::printf("Steps:      %ld/%ld\nSubmitted:  %s\nUpdated:    %s\nSpec:\n", static_cast<long>(job.steps_done()),
              static_cast<long>(job.steps_total()), When(job.submit_time_unix_ms()).c_str(),
              When(job.update_time_unix_ms()).c_str());
  std::string spec = job.spec_yaml();
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t nl = spec.find('\n', pos);
    if (nl == std::string::npos) nl = spec.size();
    std::printf("  %s\n", spec.substr(pos, nl - pos).c_str());
    pos = nl + 1;
  }
  return 0;
}

}  // namespace

int DescribeCommand(const Options& o) { return ShowJob(o, false); }
int CancelCommand(const Options& o) { return ShowJob(o, true); }

// watch JOB
int WatchCommand(const Options& o) {
  std::vector<std::string> job_id;
  CommandFlags f = CommandFlagsFor(o);
  f.Operands(&job_id, 1, 1);
  if (int rc = ParseCommand(f, o); rc >= 0) return rc;
  return Watch(o, Connect(o).get(), job_id[0]);
}

}  // namespace gantry::cli
