// What a worker does with each message of its attach stream, given the placement it runs: the
// agent's message loop (agent.cc) acts; this decides, so the rules are tested without a
// coordinator (tests/worker/agent/dispatch_test.cc).
//   - an assignment of a new (job, generation): the earlier job's ranks are joined first (the
//     coordinator assigns only an idle worker, whose earlier ranks may still be ending), then
//     the rank runs; a further rank of the same placement just runs
//   - a restart or a cancel of the job it runs: every rank stops now (Session::Abort)
//   - an abort of the job it runs (the job failed): its ranks are told, and a collective in
//     flight fails on its own, naming the ranks missing
//   - anything about another job (a late message of one it no longer runs): nothing
#pragma once

#include <cstdint>
#include <string>

#include "gantry/v1/coordinator.pb.h"

namespace gantry::agent {

class MessageDispatch {
 public:
  enum class Action {
    kNone,
    kAttached,     // the coordinator named this worker (m.worker_id)
    kRunRank,      // run m.assign() on a thread of its own
    kNewPlacement, // as kRunRank, after joining the earlier placement's ranks and clearing the cancel flag
    kAbort,        // restart or cancel: stop every rank now
    kMarkFailed,   // abort: the job failed
    kPreempt,      // the placement it runs is preempted: its ranks checkpoint after m.preempt().stop_step() and stop
  };
  Action On(const v1::CoordinatorMessage& m);
  // The placement the worker runs ("" and -1 before the first).
  const std::string& job_id() const { return job_id_; }
  int64_t generation() const { return generation_; }

 private:
  std::string job_id_;
  int64_t generation_ = -1;
};

}  // namespace gantry::agent
