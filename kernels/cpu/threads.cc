#include "kernels/threads.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace gantry::kernels {

namespace {

// The CPUs the process may use, read once before any thread is pinned: sched_getaffinity
// answers for the calling thread, and a thread created by a pinned thread inherits its
// single CPU (that made a worker's training thread run one thread on one CPU).
const std::vector<int>& ProcessCpus() {
  static const std::vector<int> cpus = [] {
    std::vector<int> out;
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
      for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (CPU_ISSET(c, &allowed)) out.push_back(c);
      }
    }
    return out;
  }();
  return cpus;
}

// Runs before main: no thread is pinned yet.
const bool kCpusRead = (ProcessCpus(), true);

}  // namespace

std::string ConfigureThreads(int n, int part, int parts) {
  (void)kCpusRead;
  const std::vector<int>& cpus = ProcessCpus();
  if (n <= 0) n = cpus.empty() ? omp_get_num_procs() : static_cast<int>(cpus.size());
  parts = std::max(1, parts);
  part = std::clamp(part, 0, parts - 1);
  const int per = std::max(1, n / parts), first = part * per;
  omp_set_num_threads(per);
  openblas_set_num_threads(per);
  const char* pin_env = std::getenv("GANTRY_PIN_THREADS");
  const bool user_binding = std::getenv("OMP_PROC_BIND") || std::getenv("GOMP_CPU_AFFINITY");
  const bool pin = !user_binding && !(pin_env && std::strcmp(pin_env, "0") == 0) && !cpus.empty();
  if (pin) {
#pragma omp parallel num_threads(per)
    {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[static_cast<size_t>(first + omp_get_thread_num()) % cpus.size()], &one);
      pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    }
  }
  std::string out = std::to_string(per) + " threads" + (pin ? ", pinned" : "");
  if (parts > 1) out += " (part " + std::to_string(part) + " of " + std::to_string(parts) + " of the CPUs)";
  return out;
}

}  // namespace gantry::kernels
