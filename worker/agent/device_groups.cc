#include "worker/agent/device_groups.h"

#include "absl/strings/str_cat.h"

#if defined(GANTRY_WITH_NCCL)
#include "comm/nccl/nccl_communicator.h"
#endif

namespace gantry::agent {

comm::GroupFactory DeviceGroups(kernels::BackendKind kind, int ordinal, std::shared_ptr<gloo::rendezvous::Store> store,
                          const comm::GlooOptions& options, std::vector<comm::Communicator*>* made) {
  if (kind != kernels::BackendKind::kCuda) return comm::GlooGroups(std::move(store), options, made);
#if defined(GANTRY_WITH_NCCL)
  comm::NcclOptions nccl;
  nccl.device = ordinal;
  nccl.timeout = options.timeout;
  nccl.failure_grace = options.failure_grace;
  return comm::NcclGroups(std::move(store), nccl, made);
#else
  (void)ordinal;
  (void)made;
  return [](const std::string& name, const std::vector<int>&, int) -> absl::StatusOr<std::unique_ptr<comm::Communicator>> {
    return absl::FailedPreconditionError(absl::StrCat(
        "group ", name, ": a cuda rank's groups are NCCL, and this build has none (NCCL was not found at configure time)"));
  };
#endif
}

}  // namespace gantry::agent
