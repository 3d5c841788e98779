// Gloo's rendezvous store on the coordinator's rendezvous RPCs (keys scoped to one job
// generation), so that the ranks of a job find each other through the coordinator.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>

#include "gantry/v1/coordinator.grpc.pb.h"

namespace gantry::agent {

class CoordinatorStore : public gloo::rendezvous::Store {
 public:
  CoordinatorStore(std::shared_ptr<v1::Coordinator::Stub> stub, std::string job_id, int64_t generation,
                   std::chrono::milliseconds timeout)
      : stub_(std::move(stub)), job_id_(std::move(job_id)), generation_(generation), timeout_(timeout) {}

  // Gloo's Store interface reports failures by exception; GlooCommunicator::Create turns
  // them into a Status.
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::string Get(const std::string& key, std::chrono::milliseconds wait);
  std::shared_ptr<v1::Coordinator::Stub> stub_;
  std::string job_id_;
  int64_t generation_;
  std::chrono::milliseconds timeout_;
};

}  // namespace gantry::agent
