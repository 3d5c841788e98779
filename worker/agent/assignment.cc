#include "worker/agent/assignment.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace gantry::agent {

absl::StatusOr<jobspec::JobSpec> AssignedSpec(const v1::Assignment& a, const std::string& work_dir) {
  const std::string what = absl::StrCat("job ", a.job_id(), " generation ", a.generation());
  auto spec = jobspec::ParseJobSpec(a.spec_yaml());
  if (!spec.ok()) return Annotate(spec.status(), what);
  if (!a.has_layout()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the assignment has no layout (a coordinator older than the "
                                                   "worker: they must be of one release)"));
  }
  const v1::Layout& m = a.layout();
  jobspec::PlacedLayout layout;
  layout.dp = m.dp(), layout.tp = m.tp(), layout.pp = m.pp(), layout.cp = m.cp();
  layout.virtual_stages = m.virtual_stages();
  layout.zero_stage = m.zero_stage();
  layout.sequence_parallel = m.sequence_parallel();
  layout.micro_batch = m.micro_batch();
  layout.recompute = m.recompute();
  // A path of this worker's own disk, not the user's (who named a place on the submitter's side),
  // and not the coordinator's to send: see AssignedSpec's comment.
  spec->checkpoint.dir = absl::StrCat(work_dir, "/", a.job_id(), "/gen", a.generation(), "/checkpoints");
  auto placed = jobspec::ApplyLayout(*std::move(spec), layout);
  if (!placed.ok()) return Annotate(placed.status(), absl::StrCat(what, ": the placement's layout"));
  if (placed->world_size() != a.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the placement's layout has ", placed->world_size(),
                                                   " ranks (dp x cp x tp x pp), the assignment's world_size ",
                                                   a.world_size()));
  }
  return placed;
}

}  // namespace gantry::agent
