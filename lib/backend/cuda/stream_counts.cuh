#pragma once
// Counted, not estimated: what the host asks of each stream. A backend registers its stream with
// a StreamCounts (StreamCountsRegistration); MNIST_LAUNCH (launch.cuh) bumps `kernels` of the
// stream it launches into, and the code that calls cuBLAS, cuDNN or NCCL, copies, sets memory or
// makes the host wait bumps the matching field with the count_* functions below. A stream nobody
// registered (a test's own stream, the default stream) is not counted.
//
// Header-only, so the emulation self-test (which links no project library) compiles launch.cuh.
// The table is a fixed array searched without a lock on every launch: a launch on a registered
// stream pays as many atomic loads as there are backends before it (a few), one on a stream
// nobody registered (a test's own) scans all kCountedStreams slots; both against microseconds
// for the launch.

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <stdexcept>

namespace mnist::cuda {

struct StreamCounts {
  std::atomic<std::uint64_t> kernels{0};        // kernel launches, library calls included
  std::atomic<std::uint64_t> library_calls{0};  // cuBLAS / cuDNN / NCCL calls (one kernel each)
  std::atomic<std::uint64_t> copies{0};         // memcpy and memset calls
  std::atomic<std::uint64_t> host_syncs{0};     // the host waited for the device
  std::atomic<std::uint64_t> graph_launches{0};
};

namespace detail {

constexpr int kCountedStreams = 64;

struct CountedStreamTable {
  std::mutex registration;  // writers only; readers never lock
  std::atomic<cudaStream_t> streams[kCountedStreams];
  std::atomic<StreamCounts*> counts[kCountedStreams];
};

// Static storage: the atomics start zeroed (no stream registered) before any constructor runs.
inline CountedStreamTable counted_streams;

}  // namespace detail

// The counts registered for `stream`, or nullptr.
inline StreamCounts* counts_of(cudaStream_t stream) noexcept {
  if (!stream) return nullptr;
  auto& table = detail::counted_streams;
  for (int i = 0; i < detail::kCountedStreams; ++i)
    if (table.streams[i].load(std::memory_order_acquire) == stream)
      return table.counts[i].load(std::memory_order_relaxed);
  return nullptr;
}

inline void count_kernel(cudaStream_t stream) noexcept {
  if (StreamCounts* c = counts_of(stream)) c->kernels.fetch_add(1, std::memory_order_relaxed);
}
// One cuBLAS/cuDNN/NCCL call: counted as one kernel (a library may launch more than one, so for
// the library engines the kernel count is a lower bound).
inline void count_library_call(cudaStream_t stream) noexcept {
  if (StreamCounts* c = counts_of(stream)) {
    c->kernels.fetch_add(1, std::memory_order_relaxed);
    c->library_calls.fetch_add(1, std::memory_order_relaxed);
  }
}
inline void count_copy(cudaStream_t stream) noexcept {
  if (StreamCounts* c = counts_of(stream)) c->copies.fetch_add(1, std::memory_order_relaxed);
}
inline void count_host_sync(cudaStream_t stream) noexcept {
  if (StreamCounts* c = counts_of(stream)) c->host_syncs.fetch_add(1, std::memory_order_relaxed);
}

// Registers `stream` -> `counts` for its lifetime (the owner's stream must outlive it).
class StreamCountsRegistration {
 public:
  StreamCountsRegistration() = default;
  StreamCountsRegistration(cudaStream_t stream, StreamCounts* counts) {
    auto& table = detail::counted_streams;
    std::lock_guard<std::mutex> lock(table.registration);
    for (int i = 0; i < detail::kCountedStreams; ++i) {
      if (table.streams[i].load(std::memory_order_relaxed) != nullptr) continue;
      table.counts[i].store(counts, std::memory_order_relaxed);
      table.streams[i].store(stream, std::memory_order_release);
      slot_ = i;
      return;
    }
    throw std::runtime_error("more than 64 CUDA streams with launch counts at once");
  }
  StreamCountsRegistration(const StreamCountsRegistration&) = delete;
  StreamCountsRegistration& operator=(const StreamCountsRegistration&) = delete;
  StreamCountsRegistration(StreamCountsRegistration&& other) noexcept : slot_(other.slot_) {
    other.slot_ = -1;
  }
  StreamCountsRegistration& operator=(StreamCountsRegistration&& other) noexcept {
    if (this != &other) {
      release();
      slot_ = other.slot_;
      other.slot_ = -1;
    }
    return *this;
  }
  ~StreamCountsRegistration() { release(); }

 private:
  void release() noexcept {
    if (slot_ < 0) return;
    auto& table = detail::counted_streams;
    std::lock_guard<std::mutex> lock(table.registration);
    table.streams[slot_].store(nullptr, std::memory_order_release);
    slot_ = -1;
  }
  int slot_ = -1;
};

}  // namespace mnist::cuda
