// DeviceCommunicator: the all-reduce of workers sharing one GPU (see device_communicator.hpp).
//
// Work split of chunk_sum_kernel: worker r launches it over its own chunk of the vector; a
// grid-stride loop gives each thread elements i of that chunk, and for each it reads the W buffers
// in worker order, sums in float, and stores the sum into all W buffers. Chunks are disjoint, so
// the W kernels (one per worker stream) never write the same element.
#include <cuda_runtime.h>

#include <vector>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "comm/device_communicator.hpp"
#include "comm/gpu_communicators.hpp"

namespace mnist {
namespace {

struct BufferList {
  float* ptr[DeviceCommunicator::kMaxWorkers];  // each [count], device memory of one GPU
  int workers;
};

__global__ void chunk_sum_kernel(BufferList buffers, std::size_t begin, std::size_t end) {
  for (const std::size_t i : cuda::grid_stride(begin, end)) {
    float sum = buffers.ptr[0][i];
    for (int q = 1; q < buffers.workers; ++q) sum += buffers.ptr[q][i];
    for (int q = 0; q < buffers.workers; ++q) buffers.ptr[q][i] = sum;
  }
}

}  // namespace

struct DeviceCommunicator::Events {
  std::vector<cudaEvent_t> ready, done;  // per worker, recorded on that worker's stream
  std::vector<float*> buffers;           // per worker, published before the first barrier
};

DeviceCommunicator::DeviceCommunicator(int gpu, int workers)
    : gpu_(gpu), workers_(workers), barrier_(workers), events_(std::make_unique<Events>()) {
  MNIST_CHECK(workers >= 1 && workers <= kMaxWorkers,
              "GPU {}: {} workers cannot share one GPU; the device all-reduce takes 1 to {}", gpu,
              workers, kMaxWorkers);
  MNIST_CUDA_CHECK(cudaSetDevice(gpu_));
  events_->ready.assign(workers, nullptr);
  events_->done.assign(workers, nullptr);
  events_->buffers.assign(workers, nullptr);
  // Timing off: these events only order streams, and timing makes record/wait slower.
  for (int k = 0; k < workers; ++k) {
    MNIST_CUDA_CHECK(cudaEventCreateWithFlags(&events_->ready[k], cudaEventDisableTiming));
    MNIST_CUDA_CHECK(cudaEventCreateWithFlags(&events_->done[k], cudaEventDisableTiming));
  }
}

DeviceCommunicator::~DeviceCommunicator() {
  // Destructors never throw: failures here are ignored (the device may be in a bad state).
  cudaSetDevice(gpu_);
  for (cudaEvent_t e : events_->ready)
    if (e) cudaEventDestroy(e);
  for (cudaEvent_t e : events_->done)
    if (e) cudaEventDestroy(e);
  cudaGetLastError();
}

std::string DeviceCommunicator::name() const {
  return fmt::format("gpu{} shared by {} worker{} (device all-reduce)", gpu_, workers_,
                     workers_ == 1 ? "" : "s");
}

void DeviceCommunicator::all_reduce_sum(int local_rank, Backend& backend, float* data,
                                        std::size_t count) {
  MNIST_CHECK(local_rank >= 0 && local_rank < workers_, "worker {} is not one of the {} on GPU {}",
              local_rank, workers_, gpu_);
  MNIST_CHECK(backend.kind() == DeviceKind::cuda && backend.stream_handle() != nullptr,
              "worker {}: the device all-reduce of GPU {} needs a CUDA backend; {} is not one",
              local_rank, gpu_, backend.name());
  if (barrier_.aborted()) throw AbortedError("run aborted by another worker's failure");
  if (count > 0) {
    cudaPointerAttributes attributes{};
    MNIST_CUDA_CHECK(cudaPointerGetAttributes(&attributes, data));
    if (attributes.type != cudaMemoryTypeDevice || attributes.device != gpu_)
      MNIST_THROW(RuntimeError,
                  "worker {} ({}) passed a buffer that is not device memory of GPU {} (it is {} "
                  "memory of device {}); all workers of a shared-GPU run must run on GPU {}",
                  local_rank, backend.name(), gpu_,
                  attributes.type == cudaMemoryTypeDevice ? "device" : "host or managed",
                  attributes.device, gpu_);
  }
  if (workers_ == 1 || count == 0) return;  // every worker passes the same count

  const auto stream = static_cast<cudaStream_t>(backend.stream_handle());
  Events& ev = *events_;
  MNIST_CUDA_CHECK(cudaSetDevice(gpu_));
  ev.buffers[local_rank] = data;
  MNIST_CUDA_CHECK(cudaEventRecord(ev.ready[local_rank], stream));
  barrier_.arrive_and_wait();  // every buffer published, every ready event recorded

  BufferList list{};
  list.workers = workers_;
  for (int q = 0; q < workers_; ++q) {
    list.ptr[q] = ev.buffers[q];
    if (q != local_rank) MNIST_CUDA_CHECK(cudaStreamWaitEvent(stream, ev.ready[q], 0));
  }
  const std::size_t begin = count * local_rank / workers_;
  const std::size_t end = count * (local_rank + 1) / workers_;
  if (end > begin) {
    MNIST_LAUNCH(chunk_sum_kernel, cuda::grid_for(end - begin), cuda::kThreads, 0, stream)
    (list, begin, end);
    MNIST_CUDA_LAUNCH_CHECK(stream, "chunk_sum_kernel");
  }
  MNIST_CUDA_CHECK(cudaEventRecord(ev.done[local_rank], stream));
  barrier_.arrive_and_wait();  // every chunk kernel queued, every done event recorded

  // Whatever this worker queues next reads its buffer, which the other workers' kernels write.
  for (int q = 0; q < workers_; ++q)
    if (q != local_rank) MNIST_CUDA_CHECK(cudaStreamWaitEvent(stream, ev.done[q], 0));
}

void DeviceCommunicator::abort() {
  barrier_.abort();
}

std::unique_ptr<Communicator> make_device_communicator(int gpu, int workers) {
  return std::make_unique<DeviceCommunicator>(gpu, workers);
}

}  // namespace mnist
