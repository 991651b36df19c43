#pragma once
// How much host memory the machine can still give this process, for the checks that refuse a run
// or a file too large for it before allocating (train/run_memory.hpp, the IDX reader).

#include <cstdint>

namespace mnist {

// Host memory available to this process: /proc/meminfo's MemAvailable, lowered by the cgroup's
// memory.max when one is set (containers, Slurm jobs). UINT64_MAX when neither can be read.
uint64_t available_host_bytes();

}  // namespace mnist
