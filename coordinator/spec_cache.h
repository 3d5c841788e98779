// Each job's spec, parsed once per coordinator: at submit (Remember), or the first time a job
// stored by an earlier coordinator is looked at (Of). Its own lock.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/metrics.h"
#include "coordinator/store.h"
#include "gantry/v1/coordinator.pb.h"
#include "jobspec/job_spec.h"

namespace gantry::coordinator {

class SpecCache {
 public:
  // The store learns each job's device kind (its queue) from here.
  SpecCache(Store* store, metrics::Registry* registry) : store_(store), registry_(registry) {}
  void Remember(const std::string& job_id, jobspec::JobSpec spec);
  // Null if the record is brief (no spec text) or its text does not parse (it did when the job
  // was accepted).
  std::shared_ptr<const jobspec::JobSpec> Of(const v1::Job& job);

 private:
  Store* store_;
  metrics::Registry* registry_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const jobspec::JobSpec>> specs_;
};

}  // namespace gantry::coordinator
