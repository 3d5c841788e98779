// Ranks of a Gloo group as threads of this test's process, meeting through an in-memory store.
#pragma once

#include <gloo/rendezvous/hash_store.h>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "comm/gloo/gloo_communicator.h"

namespace gantry::comm {

// Runs fn(comm) on `size` ranks at once, each with a communicator made with options o; each
// rank's status (its Create's where that failed).
inline std::vector<absl::Status> OnGlooRanks(int size, const GlooOptions& o,
                                             const std::function<absl::Status(GlooCommunicator&)>& fn) {
  auto store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<absl::Status> out(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto comm = GlooCommunicator::Create(r, size, store, o);
      out[static_cast<size_t>(r)] = comm.ok() ? fn(**comm) : comm.status();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace gantry::comm
