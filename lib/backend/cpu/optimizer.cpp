// Threads: contiguous element ranges (static schedule); each element is independent.
#include "backend/cpu/optimizer.hpp"

#include <cmath>

#include "backend/cpu/parallel.hpp"
#include "backend/optimizer_rule.hpp"
#include "core/error.hpp"

namespace mnist::cpu {

namespace {
template <class T>
void adam_apply(std::size_t n, std::size_t n_decay, DecayRule<T> d, T lr, T b1, T b2, T eps, T c1,
                T c2, T* params, const T* grads, T* m, T* v, int threads) {
#pragma omp parallel for simd num_threads(resolve_threads(threads)) \
    schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i)
    adam_element(i < n_decay, d, lr, b1, b2, eps, c1, c2, params[i], grads[i], m[i], v[i]);
}
}  // namespace

template <class T>
void adam_update(std::size_t n, std::size_t n_decay, const OptimizerStep& s, T* params,
                 const T* grads, T* m, T* v, int threads) {
  MNIST_CHECK(s.step >= 1, "Adam step {} must be 1-based (bias correction divides by 1-b1^t)",
              s.step);
  MNIST_CHECK(n_decay <= n, "n_decay {} exceeds the {} parameters", n_decay, n);
  const T c1 = static_cast<T>(adam_bias_correction(s.beta1, s.step));
  const T c2 = static_cast<T>(adam_bias_correction(s.beta2, s.step));
  adam_apply<T>(n, n_decay, decay_rule<T>(s), s.lr, s.beta1, s.beta2, s.epsilon, c1, c2, params,
                grads, m, v, threads);
}

void adam_update(std::size_t n, std::size_t n_decay, const OptimizerStep& constants,
                 const StepScalars& s, float* params, const float* grads, float* m, float* v,
                 int threads) {
  MNIST_CHECK(n_decay <= n, "n_decay {} exceeds the {} parameters", n_decay, n);
  adam_apply<float>(n, n_decay, DecayRule<float>{constants.l2, s.shrink}, s.lr, constants.beta1,
                    constants.beta2, s.epsilon, s.c1, s.c2, params, grads, m, v, threads);
}

namespace {
template <class T>
void sgd_apply(std::size_t n, std::size_t n_decay, DecayRule<T> d, T lr, T mu, bool nesterov,
               T* params, const T* grads, T* velocity, int threads) {
#pragma omp parallel for simd num_threads(resolve_threads(threads)) \
    schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i)
    sgd_element(i < n_decay, d, lr, mu, nesterov, params[i], grads[i], velocity[i]);
}
}  // namespace

template <class T>
void sgd_update(std::size_t n, std::size_t n_decay, const OptimizerStep& s, T* params,
                const T* grads, T* velocity, int threads) {
  MNIST_CHECK(n_decay <= n, "n_decay {} exceeds the {} parameters", n_decay, n);
  sgd_apply<T>(n, n_decay, decay_rule<T>(s), s.lr, s.momentum, s.nesterov, params, grads, velocity,
               threads);
}

void sgd_update(std::size_t n, std::size_t n_decay, const OptimizerStep& constants,
                const StepScalars& s, float* params, const float* grads, float* velocity,
                int threads) {
  MNIST_CHECK(n_decay <= n, "n_decay {} exceeds the {} parameters", n_decay, n);
  sgd_apply<float>(n, n_decay, DecayRule<float>{constants.l2, s.shrink}, s.lr, constants.momentum,
                   constants.nesterov, params, grads, velocity, threads);
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
