// The job state machine. Every change of a job's state goes through Transition, which
// checks it against the table, stamps and stores the record, and records its events.
//
//   PENDING    -> SCHEDULED | FAILED | CANCELLED
//   SCHEDULED  -> RUNNING | SUCCEEDED | RESTARTING | PREEMPTED | FAILED | CANCELLED
//   RUNNING    -> SUCCEEDED | RESTARTING | PREEMPTED | FAILED | CANCELLED
//   RESTARTING -> SCHEDULED | FAILED | CANCELLED
//   PREEMPTED  -> SCHEDULED | FAILED | CANCELLED
//   SUCCEEDED, FAILED, CANCELLED: final
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/store.h"
#include "gantry/v1/coordinator.pb.h"

namespace gantry::coordinator {

bool Terminal(v1::JobState s);
bool TransitionAllowed(v1::JobState from, v1::JobState to);

// Appends an event of the job (and wakes its watchers).
using EventSink = std::function<absl::Status(v1::JobEvent)>;

// Moves `job` (its record as read, under the job lock; the caller has set the other fields
// the change implies: reason, restarts, workers) to `to`: FAILED_PRECONDITION, naming both
// states, when the table does not allow it. Otherwise stamps update_time, stores the record,
// then records `message` (when given) and the new state as events, in that order.
absl::Status Transition(Store& store, const EventSink& events, v1::Job& job, v1::JobState to,
                        const std::string& message = "");

// Transition's check and its changes to `job` (the state, update_time), without storing
// anything: the events to record with the record, `message` (when given) then the new
// state, for a caller that writes them together (Store::Commit). On refusal `job` is
// unchanged.
absl::StatusOr<std::vector<v1::JobEvent>> PrepareTransition(v1::Job& job, v1::JobState to,
                                                            const std::string& message = "");

}  // namespace gantry::coordinator
