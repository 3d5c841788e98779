#include "worker/agent/coordinator_store.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "common/grpc_util.h"

namespace gantry::agent {

void CoordinatorStore::set(const std::string& key, const std::vector<char>& data) {
  v1::RendezvousPutRequest req;
  req.set_job_id(job_id_);
  req.set_generation(generation_);
  req.set_key(key);
  req.set_value(data.data(), data.size());
  v1::RendezvousPutResponse resp;
  auto s = stub_->RendezvousPut(ContextWithDeadline(10).get(), req, &resp);
  if (!s.ok()) throw std::runtime_error(absl::StrCat("rendezvous put '", key, "': ", s.error_message()));
}

std::string CoordinatorStore::Get(const std::string& key, std::chrono::milliseconds wait) {
  v1::RendezvousGetRequest req;
  req.set_job_id(job_id_);
  req.set_generation(generation_);
  req.set_key(key);
  req.set_wait_ms(wait.count());
  v1::RendezvousGetResponse resp;
  auto s = stub_->RendezvousGet(ContextWithDeadline(wait.count() / 1000.0 + 10).get(), req, &resp);
  if (!s.ok()) throw std::runtime_error(absl::StrCat("rendezvous get '", key, "': ", s.error_message()));
  return resp.value();
}

std::vector<char> CoordinatorStore::get(const std::string& key) {
  const std::string v = Get(key, timeout_);
  return std::vector<char>(v.begin(), v.end());
}

void CoordinatorStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  for (const auto& k : keys) Get(k, timeout);
}

}  // namespace gantry::agent
