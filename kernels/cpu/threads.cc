#include "kernels/threads.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace gantry::kernels {

std::string ConfigureThreads(int n) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  if (n <= 0) n = cpus.empty() ? omp_get_num_procs() : static_cast<int>(cpus.size());
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  const char* pin_env = std::getenv("GANTRY_PIN_THREADS");
  const bool user_binding = std::getenv("OMP_PROC_BIND") || std::getenv("GOMP_CPU_AFFINITY");
  const bool pin = !user_binding && !(pin_env && std::strcmp(pin_env, "0") == 0) && !cpus.empty();
  if (pin) {
#pragma omp parallel num_threads(n)
    {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[static_cast<size_t>(omp_get_thread_num()) % cpus.size()], &one);
      pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
    }
  }
  return std::to_string(n) + " threads" + (pin ? ", pinned" : "");
}

}  // namespace gantry::kernels
