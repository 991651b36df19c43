// Softmax cross-entropy: one warp per row (8 rows per block of 256, grid-stride over rows). The
// lanes stride over the k logits; warp shuffles give the max (with its lowest index, for accuracy)
// and the sum of exponentials. Each warp keeps its loss and hit count in lane 0; the block adds its
// 8 warps in order and writes its sums to the reduction scratch; the last block to finish
// (launch.cuh, arrive_last) adds the blocks in block order and adds that to the metrics. No
// atomics in the sums: the loss of a step is the same float however the GPU schedules its blocks
// (float atomics would add them in whatever order the blocks finish).
#include "backend/cuda/softmax_cross_entropy.hpp"

#include <cfloat>
#include <cmath>

#include "backend/cuda/channel_reduce.cuh"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/kernel_args.hpp"

namespace mnist::cuda {
namespace {

constexpr int kWarps = kThreads / 32;

// Set by arrive_last (launch.cuh).
__shared__ int last_block;

__global__ void __launch_bounds__(kThreads)
    softmax_cross_entropy_forward_kernel(int n, int k, const float* logits, const int32_t* labels,
                                         float grad_scale, float* dlogits, float* metrics,
                                         double2* partial /* [grid] */, unsigned* counter) {
  __shared__ float warp_loss[kWarps];
  __shared__ float warp_correct[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float loss_sum = 0.0f, correct = 0.0f;
  for (int row = blockIdx.x * kWarps + warp; row < n; row += gridDim.x * kWarps) {
    const float* z = logits + static_cast<std::size_t>(row) * k;
    float best = -FLT_MAX;
    int best_index = k;  // sentinel above every real index
    for (int j = lane; j < k; j += 32) {
      if (z[j] > best || (z[j] == best && j < best_index)) {
        best = z[j];
        best_index = j;
      }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
      if (other > best || (other == best && other_index < best_index)) {
        best = other;
        best_index = other_index;
      }
    }
    float sum = 0.0f;
    for (int j = lane; j < k; j += 32) sum += expf(z[j] - best);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const int label = labels[row];
    const bool valid = label >= 0 && label < k;
    if (dlogits) {
      float* d = dlogits + static_cast<std::size_t>(row) * k;
      for (int j = lane; j < k; j += 32) {
        d[j] = (expf(z[j] - best) / sum - (j == label ? 1.0f : 0.0f)) * grad_scale;
      }
    }
    if (lane == 0) {
      loss_sum += valid ? logf(sum) - (z[label] - best) : NAN;
      correct += best_index == label ? 1.0f : 0.0f;
    }
  }
  if (lane == 0) {
    warp_loss[warp] = loss_sum;
    warp_correct[warp] = correct;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float block_loss = 0.0f, block_correct = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      block_loss += warp_loss[w];
      block_correct += warp_correct[w];
    }
    partial[blockIdx.x] = make_double2(block_loss, block_correct);
  }
  if (!arrive_last(counter, last_block)) return;
  if (threadIdx.x == 0) {
    const volatile double* all = reinterpret_cast<const volatile double*>(partial);
    float loss = 0.0f, hits = 0.0f;
    for (unsigned b = 0; b < gridDim.x; ++b) {
      loss += static_cast<float>(all[2 * b]);
      hits += static_cast<float>(all[2 * b + 1]);
    }
    metrics[kLossSum] += loss;
    metrics[kCorrect] += hits;
    metrics[kSamples] += static_cast<float>(n);
  }
  depart_last(counter);
}

}  // namespace

void softmax_cross_entropy(cudaStream_t stream, int n, int k, const float* logits,
                           const int32_t* labels, float grad_scale, float* dlogits, float* metrics,
                           const ReduceScratch& scratch, unsigned* counter) {
  const unsigned blocks = static_cast<unsigned>(
      std::min<std::size_t>({static_cast<std::size_t>(std::max(1, ceil_div(n, kWarps))),
                             kMaxGridBlocks, scratch.capacity}));
  MNIST_LAUNCH(softmax_cross_entropy_forward_kernel, blocks, kThreads, 0, stream)
  (n, k, logits, labels, grad_scale, dlogits, metrics, scratch.partial, counter);
  MNIST_CUDA_LAUNCH_CHECK(stream, "softmax_cross_entropy_forward_kernel");
}

}  // namespace mnist::cuda
