// Each job's spec, parsed once per coordinator: at submit (Parse, then Remember as the store
// creates the job, before any pass can see it), or the first time a job stored by an earlier
// coordinator is looked at (Of). Every parse of this coordinator goes through Parse, and is
// counted (gantry_coordinator_spec_parses_total). Its own lock.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "coordinator/store.h"
#include "gantry/v1/coordinator.pb.h"
#include "jobspec/job_spec.h"

namespace gantry::coordinator {

class SpecCache {
 public:
  // The store learns each job's device kind (its queue) from here.
  SpecCache(Store* store, metrics::Registry* registry) : store_(store), registry_(registry) {}
  // The spec's text parsed and validated (jobspec::ParseJobSpec: INVALID_ARGUMENT naming the
  // field), counted.
  absl::StatusOr<std::shared_ptr<const jobspec::JobSpec>> Parse(const std::string& yaml);
  // Keeps the spec Parse gave for a job being created (SubmitJob, from Store::CreateJob's
  // `created`, before the job is in any queue: no pass parses it again). The store is told the
  // job's device kind by CreateJob itself.
  void Remember(const std::string& job_id, std::shared_ptr<const jobspec::JobSpec> spec);
  // The job's spec: kept, or its stored text (Job.spec_yaml, as submitted) parsed once and
  // kept, its device kind then told to the store. Null if the record is brief (no spec text)
  // or its text does not parse (it did when the job was accepted).
  std::shared_ptr<const jobspec::JobSpec> Of(const v1::Job& job);

 private:
  Store* store_;
  metrics::Registry* registry_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const jobspec::JobSpec>> specs_;
};

}  // namespace gantry::coordinator
