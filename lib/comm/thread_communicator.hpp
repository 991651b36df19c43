#pragma once
// All-reduce between worker threads of one process whose buffers are host memory (CPU backend).
//
// Each call reduces into worker 0's buffer, then every other worker copies the sum back: after
// every worker has published its buffer, worker r sums its chunk r of the vector over all buffers
// in the fixed worker order 0, 1, ... (so results do not depend on timing) and writes it into
// worker 0's buffer; once all chunks are done each worker copies the whole sum into its own
// buffer. Three barriers per call (four with the upper level): publish, sum complete, copies done.
// An optional upper level (MPI) sums worker 0's buffer across processes between the chunk sums and
// the copy-back.

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
