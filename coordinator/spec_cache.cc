#include "coordinator/spec_cache.h"

#include <glog/logging.h>

namespace gantry::coordinator {

absl::StatusOr<std::shared_ptr<const jobspec::JobSpec>> SpecCache::Parse(const std::string& yaml) {
  registry_->GetCounter("gantry_coordinator_spec_parses_total", "Job specs parsed (once per job and coordinator).").Increment();
  auto spec = jobspec::ParseJobSpec(yaml);
  if (!spec.ok()) return spec.status();
  return std::make_shared<const jobspec::JobSpec>(*std::move(spec));
}

void SpecCache::Remember(const std::string& job_id, std::shared_ptr<const jobspec::JobSpec> spec) {
  std::lock_guard<std::mutex> l(mu_);
  specs_[job_id] = std::move(spec);
}

std::shared_ptr<const jobspec::JobSpec> SpecCache::Of(const v1::Job& job) {
  std::lock_guard<std::mutex> l(mu_);
  auto& cached = specs_[job.id()];
  if (cached) return cached;
  // A brief record: nothing to parse. (spec_normalised, which older coordinators wrote beside
  // spec_yaml, is not read: the ranks read spec_yaml, and the coordinator reads what they do.)
  if (job.spec_yaml().empty()) {
    specs_.erase(job.id());
    return nullptr;
  }
  auto spec = Parse(job.spec_yaml());
  if (!spec.ok()) {
    LOG(WARNING) << "job " << job.id() << ": its stored spec does not parse: " << spec.status();
    specs_.erase(job.id());
    return nullptr;
  }
  cached = *std::move(spec);
  store_->SetDevice(job.id(), cached->resources.device);  // its queue
  return cached;
}

}  // namespace gantry::coordinator
