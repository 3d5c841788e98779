// The process groups of a rank, by the device its model runs on: NCCL on the rank's GPU for
// cuda (the buffers that move between GPUs are device buffers, never staged through the
// host), Gloo over TCP for cpu and cuda-emulated (whose device memory is host memory). The
// worker takes this one path for every kind, so CI, with cuda-emulated and Gloo underneath,
// runs the groups, the buffer ownership and the order of calls that a GPU job runs on NCCL.
#pragma once

#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "worker/parallel/gloo_communicator.h"

namespace gantry::parallel {

// kind and ordinal: the rank's device (cuda: the GPU its communicators are created on). Gloo
// listens on options.hostname; both take options' timeout and failure grace. In a build
// without NCCL a cuda group is FAILED_PRECONDITION, naming why.
GroupFactory DeviceGroups(kernels::BackendKind kind, int ordinal, std::shared_ptr<gloo::rendezvous::Store> store,
                          const GlooOptions& options, std::vector<Communicator*>* made = nullptr);

}  // namespace gantry::parallel
