#pragma once
// Gradient averaging between distinct GPUs with NCCL: one rank per local worker thread, each with
// its own communicator handle, all created together before the first collective.
//
// Lifecycle (DESIGN "NCCL discipline"):
//   - construction (on the coordinator thread, before any worker starts): one group of
//     ncclCommInitRankConfig calls, one per GPU, so NCCL sets up all local ranks at once; returns
//     when every rank is ready (or throws naming the rank and device that failed);
//   - all_reduce_sum(k, backend, data, count) on worker k's own thread: ncclAllReduce in place on
//     backend k's stream. The host does not wait for the sum: it waits only until NCCL has queued
//     the collective on that stream (so the optimizer kernel the caller queues next runs after it),
//     and checks ncclCommGetAsyncError for errors of earlier collectives while it does;
//   - abort(): ncclCommAbort on every rank. The trainer calls it when a worker fails and when its
//     watchdog finds a stalled worker; a worker blocked in backend.synchronize() behind a
//     collective whose peer never arrives is released (NCCL kernels stop), and any later
//     all_reduce_sum throws AbortedError at once.
// The communicators are non-blocking (ncclConfig_t::blocking = 0): no NCCL call ever blocks a
// thread, so abort() can always take the lock that keeps it from freeing a communicator another
// thread is using.
//
// No NCCL or CUDA type appears here; the implementation is nccl_communicator.cu (built with NCCL).

#include <atomic>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/gpu_communicators.hpp"

namespace mnist {

class NcclCommunicator : public Communicator {
 public:
  // One process: rank k on gpus[k] (CUDA ordinals, all distinct), world size gpus.size().
  explicit NcclCommunicator(const std::vector<int>& gpus);
  // One process of several (multi-node): local worker k is global rank first_rank + k on gpus[k]
  // of `world_size` ranks. `id` comes from make_nccl_id() on one process and is broadcast to the
  // others (the MPI process group does that); every process constructs with the same id, and the
  // constructor returns when all ranks of the world have joined.
  NcclCommunicator(const std::vector<int>& gpus, const NcclIdBytes& id, int first_rank,
                   int world_size);
  // Finalizes and destroys every rank (or aborts them, when a collective failed). Never throws.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string name() const override;
  int local_size() const override { return static_cast<int>(gpus_.size()); }
  int global_size() const override { return world_size_; }
  void all_reduce_sum(int local_rank, Backend& backend, float* data, std::size_t count) override;
  void abort() override;

 private:
  struct Ranks;  // the ncclComm_t handles, kept out of this header
  void init(const NcclIdBytes& id);
  // Polls rank k until its last NCCL call (`what`) finished; throws its error, or AbortedError.
  // `bounded`: give up after a timeout (set-up); collectives are bounded by the trainer's watchdog.
  void wait_ready(int local_rank, const char* what, bool bounded);

  std::vector<int> gpus_;
  int first_rank_ = 0;
  int world_size_ = 0;
  std::unique_ptr<Ranks> ranks_;
  // Shared while a worker calls into NCCL, exclusive while abort() frees the communicators.
  std::shared_mutex lifetime_;
  std::atomic<bool> aborted_{false};
};

}  // namespace mnist
