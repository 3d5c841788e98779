// What a rank makes of its assignment. The spec it runs, read in one place: the job's spec as its user
// submitted it (Assignment.spec_yaml), parsed once, with the placement's layout (the
// Assignment's typed layout fields, their one owner: an elastic job's dp, a parallel: auto
// job's planner's choice) applied by jobspec::ApplyLayout, and this worker's checkpoint
// directory for the placement. Nothing else in the worker changes a spec's layout.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "gantry/v1/coordinator.pb.h"
#include "jobspec/job_spec.h"

namespace gantry::agent {

// The assignment's spec, placed: INVALID_ARGUMENT naming the field when the text does not parse
// or the layout is not one the spec admits (jobspec::ApplyLayout), or when the layout's ranks are
// not the assignment's world_size.
//
// checkpoint.dir becomes WORK_DIR/JOB/genGENERATION/checkpoints, under the worker's own
// --work_dir. The user's checkpoint.dir names a place on the submitter's side (gantry-train
// writes there), not one on a worker, and a cluster job's checkpoints stream from memory to the
// shard servers (WorkerHooks::on_checkpoint_part): the trainer writes nothing under this
// directory. Setting it keeps the user's path from ever being one the daemon creates, and keeps
// generations apart should a local write appear. It is not an Assignment field: the coordinator
// cannot know a worker's disk, and it is no part of the layout (docs/decisions.md, 2026-11-29,
// "The worker names checkpoint.dir itself").
absl::StatusOr<jobspec::JobSpec> AssignedSpec(const v1::Assignment& a, const std::string& work_dir);

}  // namespace gantry::agent
