// The process groups of a rank, by the device its model runs on: NCCL on the rank's GPU for
// cuda (the buffers that move between GPUs are device buffers, never staged through the
// host), Gloo over TCP for cpu and cuda-emulated (whose device memory is host memory). The
// worker takes this one path for every kind, so CI, with cuda-emulated and Gloo underneath,
// runs the groups, the buffer ownership and the order of calls that a GPU job runs on NCCL.
#pragma once

#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "comm/gloo/gloo_communicator.h"

namespace gantry::agent {

// kind and ordinal: the rank's device (cuda: the GPU its communicators are created on). Gloo
// listens on options.hostname; both take options' timeout and failure grace. In a build
// without NCCL a cuda group is FAILED_PRECONDITION, naming why.
comm::GroupFactory DeviceGroups(kernels::BackendKind kind, int ordinal, std::shared_ptr<gloo::rendezvous::Store> store,
                          const comm::GlooOptions& options, std::vector<comm::Communicator*>* made = nullptr);

}  // namespace gantry::agent
