#pragma once
// Softmax cross-entropy fused with accuracy; contract as Backend::softmax_cross_entropy.
//
// logits[n, k], labels int32[n] (each in [0, k), checked: a bad label throws DataError naming the
// sample and value). Accumulates metrics[kLossSum] += sum of -log softmax(logits)[label],
// metrics[kCorrect] += number of samples whose argmax (lowest index among ties) equals the label,
// metrics[kSamples] += n. When dlogits is not nullptr, assigns dlogits = (softmax - onehot) *
// grad_scale. Computed in double per sample (log-sum-exp shifted by the row maximum).
// Threads: contiguous ranges of samples; the metric sums are combined by an OpenMP reduction.

#include <cstdint>

namespace mnist::cpu {

template <class T>
void softmax_cross_entropy(int n, int k, const T* logits, const int32_t* labels, float grad_scale,
                           T* dlogits, T* metrics, int threads);

}  // namespace mnist::cpu
