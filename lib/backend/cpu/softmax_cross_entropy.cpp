// Threads: contiguous ranges of samples; loss and correct counts reduced in double / int64.
#include "backend/cpu/softmax_cross_entropy.hpp"

#include <cmath>
#include <cstddef>

#include "backend/cpu/parallel.hpp"
#include "backend/kernel_args.hpp"
#include "core/error.hpp"

namespace mnist::cpu {

template <class T>
void softmax_cross_entropy(int n, int k, const T* logits, const int32_t* labels, float grad_scale,
                           T* dlogits, T* metrics, int threads) {
  // Validate before the parallel region: an exception must not escape an OpenMP team.
  for (int i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= k) {
      MNIST_THROW(DataError, "label of batch sample {} is {}, outside the {} classes [0, {})", i,
                  labels[i], k, k);
    }
  }
  double loss = 0;
  long long correct = 0;
#pragma omp parallel for num_threads(resolve_threads(threads)) schedule(static) \
    reduction(+ : loss, correct) if (static_cast<std::size_t>(n) * k >= kParallelMinElements / 4)
  for (int i = 0; i < n; ++i) {
    const T* row = logits + static_cast<std::size_t>(i) * k;
    int best = 0;
    for (int j = 1; j < k; ++j) {
      if (row[j] > row[best]) best = j;
    }
    const double shift = row[best];
    double denom = 0;
    for (int j = 0; j < k; ++j) denom += std::exp(static_cast<double>(row[j]) - shift);
    const double log_denom = std::log(denom);
    loss += log_denom - (static_cast<double>(row[labels[i]]) - shift);
    correct += best == labels[i] ? 1 : 0;
    if (dlogits) {
      T* drow = dlogits + static_cast<std::size_t>(i) * k;
      for (int j = 0; j < k; ++j) {
        const double p = std::exp(static_cast<double>(row[j]) - shift - log_denom);
        drow[j] = static_cast<T>((p - (j == labels[i] ? 1.0 : 0.0)) * grad_scale);
      }
    }
  }
  metrics[kLossSum] += static_cast<T>(loss);
  metrics[kCorrect] += static_cast<T>(correct);
  metrics[kSamples] += static_cast<T>(n);
}

template void softmax_cross_entropy<float>(int, int, const float*, const int32_t*, float, float*,
                                           float*, int);
template void softmax_cross_entropy<double>(int, int, const double*, const int32_t*, float, double*,
                                            double*, int);

}  // namespace mnist::cpu
