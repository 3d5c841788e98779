// What a worker sends up its attach stream (v1::WorkerMessage), built one way for the worker
// daemon's agent (worker/agent: AttachOnce's registration and heartbeats, Session's step
// reports, checkpoint parts and ends of job) and the simulated workers of the control-plane
// load test (bench/load/fleet.cc). Each builder fills the fields that name the sender and its
// placement; the caller adds what only it knows (a step's numbers, an echo, ...).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "gantry/v1/coordinator.pb.h"

namespace gantry::protocol {

// The first message of a session: the worker's resources.
v1::WorkerMessage RegisterMessage(const v1::Resources& resources);

// A heartbeat at time_unix_ms; the running job's ranks go on with AddRankProgress.
v1::WorkerMessage HeartbeatMessage(int64_t time_unix_ms);
// The running job's placement on a heartbeat, and one of its ranks here with its last step
// (as Session::FillHeartbeat; the caller may add the rank's collectives).
v1::RankProgress* AddRankProgress(v1::Heartbeat* hb, const std::string& job_id, int64_t generation, int rank,
                                  int64_t step);

// A step update of this job generation and rank; the caller fills the report.
v1::StepReport* SetStepUpdate(const v1::Assignment& a, v1::WorkerMessage* m);

// This rank's part of the checkpoint of `step`, of this job generation; the caller adds the
// files (AddPlacedFile), the bytes and, on rank 0, the manifest.
v1::CheckpointPart* SetCheckpointPart(const v1::Assignment& a, int64_t step, v1::WorkerMessage* m);
// A file of the part, written on the shard server of its slice.
void AddPlacedFile(v1::CheckpointPart* p, const std::string& name, const std::string& shard_server);

// The end of this rank of the job generation: ok, or the error with its code (a cancelled
// rank: absl::CancelledError("cancelled")). The caller adds the unreachable shard servers.
v1::WorkerMessage JobDoneMessage(const v1::Assignment& a, const absl::Status& s);

}  // namespace gantry::protocol
