#include "coordinator/spec_cache.h"

#include <glog/logging.h>

namespace gantry::coordinator {

void SpecCache::Remember(const std::string& job_id, jobspec::JobSpec spec) {
  store_->SetDevice(job_id, spec.resources.device);  // its queue
  std::lock_guard<std::mutex> l(mu_);
  specs_[job_id] = std::make_shared<const jobspec::JobSpec>(std::move(spec));
}

std::shared_ptr<const jobspec::JobSpec> SpecCache::Of(const v1::Job& job) {
  std::lock_guard<std::mutex> l(mu_);
  auto& cached = specs_[job.id()];
  if (cached) return cached;
  if (job.spec_yaml().empty() && job.spec_normalised().empty()) {  // a brief record: nothing to parse
    specs_.erase(job.id());
    return nullptr;
  }
  auto spec = jobspec::ParseJobSpec(job.spec_normalised().empty() ? job.spec_yaml() : job.spec_normalised());
  registry_->GetCounter("gantry_coordinator_spec_parses_total", "Job specs parsed (once per job and coordinator).").Increment();
  if (!spec.ok()) {
    LOG(WARNING) << "job " << job.id() << ": its stored spec does not parse: " << spec.status();
    specs_.erase(job.id());
    return nullptr;
  }
  cached = std::make_shared<const jobspec::JobSpec>(*std::move(spec));
  store_->SetDevice(job.id(), cached->resources.device);  // its queue
  return cached;
}

}  // namespace gantry::coordinator
