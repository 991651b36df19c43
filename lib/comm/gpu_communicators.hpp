#pragma once
// Communicators between GPU workers, behind factories with no CUDA or NCCL type in sight, so the
// CPU-only parts of the tool (device planning, the CLI, unit tests) can ask for them. The
// implementations live in nccl_communicator.cu (built with NCCL) and device_communicator.cu (built
// with CUDA); nccl_unavailable.cpp and device_communicator_unavailable.cpp stand in for them in
// builds without those parts, with factories that throw a clear error.
//
// Both follow comm/communicator.hpp: worker k calls all_reduce_sum(k, its backend, its device
// buffer, count) and every buffer then holds the element-wise sum. Neither waits on the host for
// the sum itself: the result is ordered on the caller's backend stream, before whatever the caller
// queues next there (the optimizer step), and is visible to the host after backend.synchronize().

#include <array>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"

namespace mnist {

// True when this binary was built with NCCL (distinct GPUs can average gradients).
bool nccl_available();

// One NCCL rank per entry of `gpus` (CUDA ordinals, all distinct), created together in one group
// before any collective. Local worker k uses rank k on gpus[k]. Throws RuntimeError when the tool
// was built without NCCL, when an ordinal repeats, or when NCCL cannot set the ranks up (naming
// the device and rank).
std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<int>& gpus);

// The NCCL unique id as plain bytes (ncclUniqueId is 128 bytes), so a process group can broadcast
// it with MPI without seeing NCCL types.
using NcclIdBytes = std::array<char, 128>;
// A fresh id (process 0 creates it; the others receive it). Throws without NCCL.
NcclIdBytes make_nccl_id();
// This process's share of a run over `world_size` ranks: local worker k is global rank
// first_rank + k on gpus[k]. Every process calls it with the same id; it returns once all ranks
// have joined.
std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<int>& gpus,
                                                     const NcclIdBytes& id, int first_rank,
                                                     int world_size);

// `workers` worker threads whose backends all run on the one GPU `gpu` (devices.gpus: [0, 0]):
// NCCL refuses two ranks on one device, so the sum is computed by a kernel reading every worker's
// buffer directly. Deterministic (fixed summation order, worker 0 first). Throws RuntimeError when
// the tool was built without CUDA.
std::unique_ptr<Communicator> make_device_communicator(int gpu, int workers);

}  // namespace mnist
