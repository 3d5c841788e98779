// The agent's message rules (dispatch.h).
#include "worker/agent/dispatch.h"

namespace gantry::agent {

MessageDispatch::Action MessageDispatch::On(const v1::CoordinatorMessage& m) {
  if (!m.worker_id().empty()) return Action::kAttached;
  if (m.has_assign()) {
    if (m.assign().job_id() == job_id_ && m.assign().generation() == generation_) return Action::kRunRank;
    job_id_ = m.assign().job_id();
    generation_ = m.assign().generation();
    return Action::kNewPlacement;
  }
  if (job_id_.empty()) return Action::kNone;
  if (m.restart_job_id() == job_id_ || m.cancel_job_id() == job_id_) return Action::kAbort;
  if (m.abort_job_id() == job_id_) return Action::kMarkFailed;
  if (m.has_preempt() && m.preempt().job_id() == job_id_ && m.preempt().generation() == generation_) {
    return Action::kPreempt;
  }
  return Action::kNone;
}

}  // namespace gantry::agent
