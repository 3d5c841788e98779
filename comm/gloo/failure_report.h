// Naming the ranks that did not arrive at a failed collective. A transport error says only
// that something broke (a socket closed, a wait timed out); which rank is gone is found out
// of band: every rank that sees the group fail reports it once in the rendezvous store
// (key gantry/failed/RANK, which the coordinator keeps after the job has failed), then waits
// up to `grace` for the others' reports. The ranks whose report does not come are dead, hung
// or cut off: they did not arrive.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace gloo::rendezvous {
class Store;
}

namespace gantry::comm {

// "rank 2 did not arrive (...)", "ranks 1, 3 did not arrive (...)", or a sentence saying
// every rank reported (a network fault) or that the store could not be reached.
// Stops waiting early once *stop is set (the placement was aborted).
std::string ReportFailureAndFindMissing(gloo::rendezvous::Store& store, int rank, int size, uint64_t seq,
                                        std::chrono::milliseconds grace, const std::atomic<bool>* stop = nullptr);

// The default grace for a collective timeout. It must exceed the timeout: a survivor that
// sees a peer's socket close fails at once, while one whose own peers are alive notices
// only when its timeout runs out. So timeout + half of it (at most 10 s more).
std::chrono::milliseconds DefaultFailureGrace(std::chrono::milliseconds timeout);
}  // namespace gantry::comm
