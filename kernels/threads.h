// Thread setup for the CPU kernels (OpenMP, and OpenBLAS in its OpenMP build).
#pragma once

#include <string>

namespace gantry::kernels {

// Sets the OpenMP and OpenBLAS thread count (n <= 0: one per CPU the process may use) and
// pins thread i to the i-th CPU of the process's affinity mask (as it was at start).
// Call it from the thread that will run the parallel regions: OpenMP's settings and teams
// belong to that thread. Unpinned threads can be
// stacked on one CPU for a while by the scheduler, which on a small VM made steps up to
// 1.6x slower at random (docs/perf/cpu.md). Pinning is skipped when the user set
// OMP_PROC_BIND or GOMP_CPU_AFFINITY, or GANTRY_PIN_THREADS=0. Returns a one-line summary.
// Several teams in one process (the ranks of a worker with several GPUs) share its CPUs:
// team `part` of `parts` takes n / parts threads (at least one) and, pinned, the CPUs from
// part * (n / parts) on, so that the teams do not stack on the same CPUs.
std::string ConfigureThreads(int n, int part = 0, int parts = 1);

}  // namespace gantry::kernels
