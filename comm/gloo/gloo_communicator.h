// The CPU Communicator: Gloo (Debian's libgloo) over its TCP transport. Ranks find each
// other through a rendezvous store: gloo::rendezvous::HashStore in one process (tests), the
// coordinator's rendezvous (CoordinatorStore) in a cluster.
#pragma once

#include <chrono>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/groups.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
}  // namespace gloo

namespace gantry::comm {

// Gloo's reduce function for float sums: out (n) = a (n) + b (n).
void SumFloats(void* out, const void* a, const void* b, size_t n);
// Gloo's reduce function for bf16 sums (uint16_t bits): out (n) = a (n) + b (n), each sum
// taken in fp32 and rounded to the nearest bf16, ties to even.
void SumBf16(void* out, const void* a, const void* b, size_t n);

struct GlooOptions {
  std::string hostname = "127.0.0.1";  // the address this rank listens on
  std::chrono::milliseconds timeout{30000};
  // After a collective fails, how long each rank waits for the others to report the failure
  // in the store: those that do not are named as the ranks that did not arrive. 0 =
  // DefaultFailureGrace(timeout): 1.5x the timeout, at most timeout + 10 s.
  std::chrono::milliseconds failure_grace{0};
  // Send, Recv and SendRecv between ranks on one host through shared memory
  // (comm/gloo/shm_transport.h) rather than loopback TCP; the collectives keep Gloo's TCP.
  // GlooGroups turns it on for the groups that transfer point to point (pp and cp:
  // PointToPointGroup); GANTRY_SHM_DISABLE=1 in the environment turns it off everywhere.
  bool shared_memory = false;
  // Each link's ring, per direction: a larger message streams through it in pieces.
  size_t shm_ring_bytes = size_t{1} << 20;
  // false: this rank takes part in making the group's links but offers none, so its pairs
  // keep TCP (what GANTRY_SHM_DISABLE=1 does for a process's ranks).
  bool shm_offer = true;
};

class ShmTransport;

class GlooCommunicator final : public Communicator {
 public:
  // Connects rank to all size-1 others (blocks until all have joined, or the timeout).
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(int rank, int size,
                                                                   std::shared_ptr<gloo::rendezvous::Store> store,
                                                                   const GlooOptions& options);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  uint64_t seq() const override { return seq_; }
  uint64_t completed() const override { return completed_.load(); }
  absl::Status AllReduceSum(float* data, size_t n) override;
  absl::Status ReduceScatterSum(const float* in, float* out, size_t n) override;
  absl::Status AllGather(const float* in, float* out, size_t n) override;
  // Gloo's alltoall and alltoallv (every send and receive posted at once, then waited for).
  absl::Status AllToAll(const float* in, float* out, size_t n) override;
  absl::Status AllToAllV(const float* in, const std::vector<size_t>& send_counts, float* out,
                         const std::vector<size_t>& recv_counts) override;
  absl::Status AllReduceSumBf16(uint16_t* data, size_t n) override;
  absl::Status ReduceScatterSumBf16(const uint16_t* in, uint16_t* out, size_t n) override;
  absl::Status Broadcast(float* data, size_t n, int root) override;
  absl::Status Send(const float* data, size_t n, int peer) override;
  absl::Status Recv(float* data, size_t n, int peer) override;
  // Both sides posted at once on the pairs Send and Recv use (a peer's Send or Recv matches
  // them), then both waited for under the timeout.
  absl::Status SendRecv(const float* send, size_t send_n, int to, float* recv, size_t recv_n, int from) override;
  absl::Status Barrier() override;
  // The job's placement is over (the coordinator said so, or is gone): the current or next
  // collective's failure ends at once, as ABORTED, without waiting out the failure grace
  // for the other ranks' reports. Thread-safe.
  void Abort() override;
  // The peers this rank reaches through shared memory (GlooOptions::shared_memory).
  int shared_memory_links() const;
  bool SharedMemoryWith(int peer) const;
  // How many times a transfer waited on a shared-memory link (its peer not yet there). Thread-safe.
  uint64_t shared_memory_waits() const;

 private:
  GlooCommunicator(int rank, int size, std::shared_ptr<gloo::Context> ctx,
                   std::shared_ptr<gloo::rendezvous::Store> store, GlooOptions o, std::unique_ptr<ShmTransport> shm);
  // The point-to-point transfers: each side over shared memory where this rank has a link to
  // its peer, over TCP otherwise (a side whose peer is -1 is skipped). Throws as Gloo does.
  void Transfer(const float* send, size_t send_n, int to, float* recv, size_t recv_n, int from);
  // Runs one collective: takes the next sequence number (also its Gloo tag/slot) and turns
  // an exception into an error that names the collective, the sequence number and the rank.
  template <typename F>
  absl::Status Run(const char* what, F&& f);
  // The sums over elements of type T (fp32, bf16), added by sum (a Gloo reduce function).
  template <typename T>
  absl::Status AllReduce(T* data, size_t n, void (*sum)(void*, const void*, const void*, size_t));
  template <typename T>
  absl::Status ReduceScatter(const T* in, T* out, size_t n, void (*sum)(void*, const void*, const void*, size_t));

  int rank_, size_;
  std::shared_ptr<gloo::Context> ctx_;
  std::shared_ptr<gloo::rendezvous::Store> store_;
  GlooOptions options_;
  uint64_t seq_ = 0;
  std::string broken_;  // set by the first failure: the group is not usable after it
  std::atomic<bool> aborted_{false};
  std::atomic<uint64_t> completed_{0};
  std::unique_ptr<ShmTransport> shm_;  // null without shared memory
};

// Process groups (comm/groups.h) of Gloo communicators over one rendezvous store, each
// group's keys under its name. Every communicator made is also appended to *made, when
// given (the worker aborts them all at once).
GroupFactory GlooGroups(std::shared_ptr<gloo::rendezvous::Store> store, const GlooOptions& options,
                        std::vector<Communicator*>* made = nullptr);
// Process groups whose members meet through one rendezvous store, each group's keys under
// its name: create makes member `index` of a group of `size` on that group's view of the
// store. Errors name the group; every communicator made is appended to *made, when given.
using MemberFactory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
    int index, int size, std::shared_ptr<gloo::rendezvous::Store> group_store)>;
GroupFactory StoreGroups(std::shared_ptr<gloo::rendezvous::Store> store, MemberFactory create,
                         std::vector<Communicator*>* made);
// StoreGroups whose members are C::Create(index, size, group_store, options).
template <typename C, typename Options>
GroupFactory StoreGroupsOf(std::shared_ptr<gloo::rendezvous::Store> store, const Options& options,
                           std::vector<Communicator*>* made) {
  return StoreGroups(
      std::move(store),
      [options](int index, int size, std::shared_ptr<gloo::rendezvous::Store> s)
          -> absl::StatusOr<std::unique_ptr<Communicator>> {
        auto c = C::Create(index, size, std::move(s), options);
        if (!c.ok()) return c.status();
        return std::unique_ptr<Communicator>(std::move(*c));
      },
      made);
}

}  // namespace gantry::comm
