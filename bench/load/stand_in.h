// The control-plane load test's stand-in jobs: the specs the clients submit, and the
// checkpoint files the simulated workers' stand-in trainers write (and the test reads back).
#pragma once

#include <cstdint>
#include <string>

#include "bench/load/control_plane.h"

namespace gantry::load {

// ---- What the stand-in trainers write: bytes that depend only on (job, step, file), so
// that a step written again after a restart is the same, and a read-back can be checked.

// n bytes of file `name` of the job's checkpoint of `step`.
std::string FileBytes(const std::string& job, int64_t step, const std::string& name, int n);
// A rank's file of one slice (of `slices` in the partition map).
std::string PartName(int rank, int slice, int slices);
// Rank 0's manifest.json, naming every rank's parts.
std::string ManifestFile(const std::string& job, int64_t step, int world, int slices);
// Any file of a checkpoint as written: manifest, config or part.
std::string ExpectedFile(const std::string& job, int64_t step, const std::string& name, int world, int slices,
                         int part_bytes);

// The spec of job i (load-<i>).
std::string JobSpec(int i, const ControlPlaneOptions& o);
// The job's index from the spec's name (load-<i>), or -1.
int SpecIndex(const std::string& yaml);

}  // namespace gantry::load
