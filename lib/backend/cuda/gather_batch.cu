// gather_batch: grid-stride over n * pixels output values; consecutive threads read consecutive
// bytes of one image, so the loads of a warp are coalesced. The thread that handles pixel 0 of a
// row also writes that row's label. From a ring of several steps' indices, every thread first
// finds its step's slot from the StepScalars in device memory.
#include "backend/cuda/gather_batch.hpp"

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"

namespace mnist::cuda {
namespace {

__global__ void gather_batch_forward_kernel(const uint8_t* images, const uint8_t* labels,
                                            int pixels, const int32_t* indices, int ring_steps,
                                            const StepScalars* step, int n, float* x, int32_t* y) {
  if (step) indices += static_cast<std::size_t>(step->step % ring_steps) * n;
  const std::size_t total = static_cast<std::size_t>(n) * pixels;
  for (const std::size_t i : grid_stride(total)) {
    const std::size_t row = i / pixels, p = i % pixels;
    const std::size_t image = static_cast<std::size_t>(indices[row]);
    x[i] = static_cast<float>(images[image * pixels + p]) / 255.0f;
    if (p == 0) y[row] = labels[image];
  }
}

}  // namespace

void gather_batch(cudaStream_t stream, const BatchGather& b, int n) {
  const std::size_t total = static_cast<std::size_t>(n) * b.pixels;
  MNIST_LAUNCH(gather_batch_forward_kernel, grid_for(total), kThreads, 0, stream)
  (b.images, b.labels, b.pixels, b.ring, b.ring_steps, b.step, n, b.x, b.y);
  MNIST_CUDA_LAUNCH_CHECK(stream, "gather_batch_forward_kernel");
}

}  // namespace mnist::cuda
