#include "comm/thread_communicator.hpp"

#include <chrono>

namespace mnist {

void AbortableBarrier::arrive_and_wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted_) throw AbortedError("run aborted by another worker's failure");
  const uint64_t generation = generation_;
  if (++waiting_ == parties_) {
    waiting_ = 0;
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation || aborted_; });
  if (generation_ == generation) throw AbortedError("run aborted by another worker's failure");
}

void AbortableBarrier::abort() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
  }
  cv_.notify_all();
}

ThreadCommunicator::ThreadCommunicator(int workers, UpperReduce upper, int processes)
    : workers_(workers),
      processes_(processes),
      upper_(std::move(upper)),
      barrier_(workers),
      buffers_(static_cast<std::size_t>(workers), nullptr) {
  MNIST_CHECK(workers >= 1, "thread communicator needs at least one worker, got {}", workers);
}

std::string ThreadCommunicator::name() const {
  const std::string local =
      fmt::format("in-process sum over {} worker{}", workers_, workers_ == 1 ? "" : "s");
  return processes_ > 1 ? fmt::format("{}, then MPI over {} processes", local, processes_) : local;
}

void ThreadCommunicator::all_reduce_sum(int local_rank, Backend& backend, float* data,
                                        std::size_t count) {
  MNIST_CHECK(backend.kind() == DeviceKind::cpu,
              "the thread communicator reduces host memory; {} is not a CPU backend",
              backend.name());
  if (workers_ == 1 && !upper_) return;
  buffers_[local_rank] = data;
  barrier_.arrive_and_wait();  // every buffer published
  // Reduce-scatter: this worker owns [begin, end) and sums it in worker order 0, 1, ... W-1.
  const std::size_t begin = count * local_rank / workers_;
  const std::size_t end = count * (local_rank + 1) / workers_;
  float* first = buffers_[0];
  for (std::size_t i = begin; i < end; ++i) {
    float sum = first[i];
    for (int q = 1; q < workers_; ++q) sum += buffers_[q][i];
    first[i] = sum;
  }
  if (upper_) {
    barrier_.arrive_and_wait();  // worker 0's buffer holds this process's sum
    if (local_rank == 0) upper_(first, count);
  }
  barrier_.arrive_and_wait();  // the sum is complete in worker 0's buffer
  if (local_rank != 0) std::copy(first + 0, first + count, data);
  barrier_.arrive_and_wait();  // nobody still reads worker 0's buffer when the next call starts
}

void ThreadCommunicator::abort() {
  barrier_.abort();
}

}  // namespace mnist
