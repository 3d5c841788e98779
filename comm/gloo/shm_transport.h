// Point-to-point transfers between the ranks of one group that share a host, through shared
// memory instead of Gloo's loopback TCP: the pipeline's activations and gradients, context
// parallelism's K/V ring. A transfer is then two copies made by the two ranks themselves (into
// the receiver's ring, out of it) and a futex wake, with no transport thread in between: on a
// pipeline of two stages sharing a 2-core machine a rendezvous cost 0.75 ms over TCP, where the
// transport threads took the CPU from the stages' compute, and 0.1-0.2 ms through memory
// (docs/perf/cluster.md, "A shared-memory link for ranks on one host").
//
// Each rank owns one POSIX shared-memory segment: a doorbell (a futex word bumped on every
// event that rank may be waiting for) and one byte ring per peer on its host, into which that
// peer writes. A message is a 16-byte header (a mark and its byte count, which the receiver
// checks against what it expects) and its bytes, streamed through the ring in as many pieces
// as the ring's room allows, so a message of any size passes a ring of any size. Rings are
// single-producer single-consumer: the writer advances `written`, the reader `read`.
//
// Links are made at a group's creation, over its rendezvous store, between ranks that see the
// same /dev/shm (boot id and the mount's device and inode) and could each map the other's
// segment (a random cookie in the segment proves it is the one published). A pair without a
// link keeps TCP: nothing fails for want of shared memory. The segment's name is unlinked once
// every peer has mapped it (and by the destructor, should creation fail half-way), so nothing
// is left in /dev/shm by a group that was made.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gloo::rendezvous {
class Store;
}

namespace gantry::comm {

class ShmTransport {
 public:
  // ring_bytes under kMinRingBytes (0 included): this rank offers no link (it still takes
  // part, so that no peer waits for it).
  static constexpr size_t kMinRingBytes = 64;
  // Every rank of the group calls Join at once (GlooCommunicator::Create, over the group's
  // store; the keys are under "shm/"). Returns the links this rank has (none where no peer
  // shares its host, or shared memory could not be had: *note then says why, for the log).
  // Throws std::runtime_error when the store does not answer within timeout (a rank that
  // never joined), as the mesh's own connection would.
  static std::unique_ptr<ShmTransport> Join(int rank, int size, gloo::rendezvous::Store& store, size_t ring_bytes,
                                            std::chrono::milliseconds timeout, std::string* note);
  ~ShmTransport();
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  bool Linked(int peer) const;
  int links() const;
  // How many times a Transfer of this rank's slept on its doorbell. Thread-safe.
  uint64_t waits() const { return waits_.load(); }

  // Sends send_bytes to rank `to` while recv_bytes arrive from rank `from` (either side
  // skipped where its peer is -1), both linked; returns when both are done. Progresses both
  // at once, so that two ranks exchanging messages larger than their rings never wait on each
  // other. Throws std::runtime_error naming the peer when the deadline passes, when the message
  // that arrives has another size than recv_bytes (the receiver marks its ring refused, and
  // the sender, woken, throws too, naming both sizes), or when *aborted is set (Wake ends a
  // wait; a transfer that is moving sees it at its next piece).
  void Transfer(const void* send, size_t send_bytes, int to, void* recv, size_t recv_bytes, int from,
                std::chrono::milliseconds timeout, const std::atomic<bool>& aborted);
  // Wakes a Transfer of this rank's that waits (Abort: it then sees *aborted). Thread-safe.
  void Wake();

 private:
  struct Segment;
  ShmTransport(int rank, int size);

  int rank_, size_;
  size_t ring_bytes_ = 0;
  std::unique_ptr<Segment> own_;
  std::vector<std::unique_ptr<Segment>> peers_;  // by rank: the peer's segment, where linked
  std::atomic<uint64_t> waits_{0};
  std::vector<int> out_ring_;  // by rank: the ring this rank writes in that peer's segment
  std::vector<int> in_ring_;   // by rank: the ring that peer writes in this rank's segment
};

}  // namespace gantry::comm
