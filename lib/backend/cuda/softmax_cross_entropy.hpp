#pragma once
// Fused softmax + cross-entropy + accuracy. logits[n, k], labels int32[n], dlogits[n, k] or
// nullptr, metrics float[kMetricSlots] on the device.

#include <cuda_runtime.h>

#include <cstdint>

namespace mnist::cuda {

struct ReduceScratch;

// Accumulates metrics[kLossSum] += sum of -log softmax(label), metrics[kCorrect] += rows whose
// argmax (lowest index on ties) equals the label, metrics[kSamples] += n. Assigns dlogits =
// (softmax - onehot) * grad_scale when dlogits is not nullptr. A label outside [0, k) makes that
// row's loss NaN (kernels cannot throw; the trainer's finiteness check then reports it). The
// metrics are summed in a fixed order (the blocks' sums in the scratch, added by the last block,
// counted on `counter`, the stream's block counter): the same bits on every run. One launch.
void softmax_cross_entropy(cudaStream_t stream, int n, int k, const float* logits,
                           const int32_t* labels, float grad_scale, float* dlogits, float* metrics,
                           const ReduceScratch& scratch, unsigned* counter);

}  // namespace mnist::cuda
