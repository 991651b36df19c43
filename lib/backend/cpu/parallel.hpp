#pragma once
// How the CPU kernels share work between threads.
//
// Every kernel takes `threads` (the backend's BackendOptions::threads, 0 = all cores) and opens one
// OpenMP team of at most that many threads for the call. Work is split into contiguous, balanced
// ranges (samples, planes, channels or elements) so that each thread writes a disjoint part of the
// output and results do not depend on scheduling. No state is kept between calls, so several CPU
// backends may run kernels at the same time from different worker threads.

#include <omp.h>

#include <cstddef>

namespace mnist::cpu {

// Threads a kernel call may use: `threads` when positive, otherwise every core of the machine.
inline int resolve_threads(int threads) {
  return threads > 0 ? threads : omp_get_num_procs();
}

// Part `part` of `parts` balanced contiguous ranges over [0, count): [*begin, *end).
inline void split_range(std::size_t count, int part, int parts, std::size_t* begin,
                        std::size_t* end) {
  const std::size_t base = count / static_cast<std::size_t>(parts);
  const std::size_t extra = count % static_cast<std::size_t>(parts);
  const std::size_t p = static_cast<std::size_t>(part);
  *begin = p * base + (p < extra ? p : extra);
  *end = *begin + base + (p < extra ? 1 : 0);
}

// Below this many elements an elementwise kernel runs on the calling thread: waking a team costs
// more than the work.
constexpr std::size_t kParallelMinElements = 16384;

}  // namespace mnist::cpu
