#include "coordinator/job_state.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"
#include "common/status.h"

namespace gantry::coordinator {

bool Terminal(v1::JobState s) { return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED; }

bool TransitionAllowed(v1::JobState from, v1::JobState to) {
  if (to == v1::FAILED || to == v1::CANCELLED) return !Terminal(from);
  switch (from) {
    case v1::PENDING:
      return to == v1::SCHEDULED;
    case v1::SCHEDULED:
      return to == v1::RUNNING || to == v1::SUCCEEDED || to == v1::RESTARTING || to == v1::PREEMPTED;
    case v1::RUNNING:
      return to == v1::SUCCEEDED || to == v1::RESTARTING || to == v1::PREEMPTED;
    case v1::RESTARTING:
    case v1::PREEMPTED:
      return to == v1::SCHEDULED;
    default:
      return false;
  }
}

absl::StatusOr<std::vector<v1::JobEvent>> PrepareTransition(v1::Job& job, v1::JobState to,
                                                            const std::string& message) {
  if (!TransitionAllowed(job.state(), to)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " cannot go from ",
                                                      v1::JobState_Name(job.state()), " to ", v1::JobState_Name(to)));
  }
  job.set_state(to);
  job.set_update_time_unix_ms(NowUnixMs());
  std::vector<v1::JobEvent> events;
  auto event = [&] {
    v1::JobEvent& e = events.emplace_back();
    e.set_job_id(job.id());
    e.set_time_unix_ms(job.update_time_unix_ms());
    return &e;
  };
  if (!message.empty()) event()->set_message(message);
  event()->set_state(to);
  return events;
}

absl::Status Transition(Store& store, const EventSink& events, v1::Job& job, v1::JobState to,
                        const std::string& message) {
  ASSIGN_OR_RETURN(std::vector<v1::JobEvent> prepared, PrepareTransition(job, to, message));
  RETURN_IF_ERROR(store.PutJob(job));
  for (auto& e : prepared) RETURN_IF_ERROR(events(std::move(e)));
  return absl::OkStatus();
}

}  // namespace gantry::coordinator
