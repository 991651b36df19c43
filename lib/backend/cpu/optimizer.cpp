// Threads: contiguous element ranges (static schedule); each element is independent.
#include "backend/cpu/optimizer.hpp"

#include <cmath>

#include "backend/cpu/parallel.hpp"
#include "backend/optimizer_rule.hpp"
#include "core/error.hpp"

namespace mnist::cpu {

template <class T>
void adam_update(std::size_t n, std::size_t n_decay, const OptimizerStep& s, T* params,
                 const T* grads, T* m, T* v, int threads) {
  MNIST_CHECK(s.step >= 1, "Adam step {} must be 1-based (bias correction divides by 1-b1^t)",
              s.step);
  MNIST_CHECK(n_decay <= n, "n_decay {} exceeds the {} parameters", n_decay, n);
  const T c1 = static_cast<T>(adam_bias_correction(s.beta1, s.step));
  const T c2 = static_cast<T>(adam_bias_correction(s.beta2, s.step));
  const T b1 = s.beta1, b2 = s.beta2, eps = s.epsilon, lr = s.lr;
  const DecayRule<T> d = decay_rule<T>(s);
#pragma omp parallel for simd num_threads(resolve_threads(threads)) \
    schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i)
    adam_element(i < n_decay, d, lr, b1, b2, eps, c1, c2, params[i], grads[i], m[i], v[i]);
}

template <class T>
void sgd_update(std::size_t n, std::size_t n_decay, const OptimizerStep& s, T* params,
                const T* grads, T* velocity, int threads) {
  MNIST_CHECK(n_decay <= n, "n_decay {} exceeds the {} parameters", n_decay, n);
  const T mu = s.momentum, lr = s.lr;
  const DecayRule<T> d = decay_rule<T>(s);
  const bool nesterov = s.nesterov;
#pragma omp parallel for simd num_threads(resolve_threads(threads)) \
    schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i)
    sgd_element(i < n_decay, d, lr, mu, nesterov, params[i], grads[i], velocity[i]);
}

#define MNIST_INSTANTIATE(T)                                                                     \
  template void adam_update<T>(std::size_t, std::size_t, const OptimizerStep&, T*, const T*, T*, \
                               T*, int);                                                         \
  template void sgd_update<T>(std::size_t, std::size_t, const OptimizerStep&, T*, const T*, T*,  \
                              int);
MNIST_INSTANTIATE(float)
MNIST_INSTANTIATE(double)
#undef MNIST_INSTANTIATE

}  // namespace mnist::cpu
