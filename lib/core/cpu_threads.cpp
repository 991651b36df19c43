#include "core/cpu_threads.hpp"

#include <sched.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

namespace mnist {

namespace {

// The CPU count of the affinity mask; the machine's if the mask cannot be read.
int affinity_cpus() {
  // A mask sized for more CPUs than cpu_set_t holds (1024), doubled until the kernel accepts it.
  for (int cpus = 1024; cpus <= (1 << 20); cpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    if (set == nullptr) break;
    const std::size_t size = CPU_ALLOC_SIZE(cpus);
    CPU_ZERO_S(size, set);
    const int rc = sched_getaffinity(0, size, set);
    const int count = rc == 0 ? CPU_COUNT_S(size, set) : 0;
    CPU_FREE(set);
    if (rc == 0) return count;
    if (errno != EINVAL) break;
  }
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

CpuThreads usable_cpu_threads(const std::function<const char*(const char*)>& env) {
  CpuThreads t;
  t.count = std::max(1, affinity_cpus());
  t.limit = fmt::format("the process's affinity mask ({} CPU{})", t.count, t.count == 1 ? "" : "s");
  const char* omp = env ? env("OMP_NUM_THREADS") : std::getenv("OMP_NUM_THREADS");
  if (omp != nullptr) {
    // "4" or "4,2" (nested levels: the first is the outer team's).
    char* end = nullptr;
    const long n = std::strtol(omp, &end, 10);
    if (end != omp && n > 0 && n < t.count) {
      t.count = static_cast<int>(n);
      t.limit = fmt::format("OMP_NUM_THREADS={}", omp);
    }
  }
  return t;
}

}  // namespace mnist
