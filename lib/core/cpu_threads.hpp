#pragma once
// How many CPU threads this process may use, as a shared box or a batch job allows it.

#include <functional>
#include <string>

namespace mnist {

struct CpuThreads {
  int count = 1;      // at least 1
  std::string limit;  // what set it: "affinity mask", "OMP_NUM_THREADS=2", for messages
};

// The CPUs of the process's affinity mask (sched_getaffinity: what taskset, a cgroup cpuset or
// Slurm's --cpus-per-task bind it to), or fewer when OMP_NUM_THREADS asks for fewer (its first
// value, as OpenMP reads a list). Not the machine's core count: threads beyond the mask share its
// CPUs and wait on each other at every barrier. `env` reads the environment (getenv by default).
CpuThreads usable_cpu_threads(const std::function<const char*(const char*)>& env = nullptr);

}  // namespace mnist
