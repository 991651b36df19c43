#pragma once
// All-reduce between worker threads of one process whose buffers are host memory (CPU backend).
//
// Each call is a reduce-scatter and all-gather in place: after every worker has published its
// buffer, worker r owns chunk r of the vector, sums that chunk over all buffers in a fixed worker
// order (so results do not depend on timing) and writes the sum back into every buffer. Two
// barriers per call; no copies beyond the sums themselves. An optional upper level (MPI) reduces
// across processes between the two phases.

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "comm/communicator.hpp"

namespace mnist {

// A reusable barrier that gives up when the run aborts.
class AbortableBarrier {
 public:
  explicit AbortableBarrier(int parties) : parties_(parties) {}
  // Throws AbortedError if abort() was called before or while waiting.
  void arrive_and_wait();
  void abort();
  bool aborted() const { return aborted_.load(); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int parties_;
  int waiting_ = 0;
  uint64_t generation_ = 0;
  std::atomic<bool> aborted_{false};
};

class ThreadCommunicator : public Communicator {
 public:
  // `upper` (optional) sums a host buffer across processes in place; called by local worker 0 only.
  using UpperReduce = std::function<void(float* data, std::size_t count)>;
  explicit ThreadCommunicator(int workers, UpperReduce upper = {}, int processes = 1);

  std::string name() const override;
  int local_size() const override { return workers_; }
  int global_size() const override { return workers_ * processes_; }
  void all_reduce_sum(int local_rank, Backend& backend, float* data, std::size_t count) override;
  void abort() override;

 private:
  int workers_;
  int processes_;
  UpperReduce upper_;
  AbortableBarrier barrier_;
  std::vector<float*> buffers_;
};

}  // namespace mnist
