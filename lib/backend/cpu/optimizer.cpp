// Threads: contiguous element ranges (static schedule); each element is independent.
#include "backend/cpu/optimizer.hpp"

#include <cmath>

#include "backend/cpu/parallel.hpp"
#include "core/error.hpp"

namespace mnist::cpu {

template <class T>
void adam_update(std::size_t n, std::size_t n_decay, const OptimizerStep& s, T* params,
                 const T* grads, T* m, T* v, int threads) {
  MNIST_CHECK(s.step >= 1, "Adam step {} must be 1-based (bias correction divides by 1-b1^t)",
              s.step);
  MNIST_CHECK(n_decay <= n, "n_decay {} exceeds the {} parameters", n_decay, n);
  const double t = static_cast<double>(s.step);
  const T c1 = static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(s.beta1), t)));
  const T c2 = static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(s.beta2), t)));
  const T b1 = s.beta1, b2 = s.beta2, eps = s.epsilon, lr = s.lr;
  const T l2 = s.l2, shrink = T(1) - static_cast<T>(s.lr) * static_cast<T>(s.decoupled_wd);
#pragma omp parallel for simd num_threads(resolve_threads(threads)) \
    schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) {
    const bool decay = i < n_decay;
    T p = params[i];
    const T g = decay ? grads[i] + l2 * p : grads[i];
    if (decay) p *= shrink;
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] = p - lr * (mi * c1) / (std::sqrt(vi * c2) + eps);
  }
}

template <class T>
void sgd_update(std::size_t n, std::size_t n_decay, const OptimizerStep& s, T* params,
                const T* grads, T* velocity, int threads) {
  MNIST_CHECK(n_decay <= n, "n_decay {} exceeds the {} parameters", n_decay, n);
  const T mu = s.momentum, lr = s.lr, l2 = s.l2;
  const T shrink = T(1) - static_cast<T>(s.lr) * static_cast<T>(s.decoupled_wd);
  const bool nesterov = s.nesterov;
#pragma omp parallel for simd num_threads(resolve_threads(threads)) \
    schedule(static) if (n >= kParallelMinElements)
  for (std::size_t i = 0; i < n; ++i) {
    const bool decay = i < n_decay;
    T p = params[i];
    const T g = decay ? grads[i] + l2 * p : grads[i];
    if (decay) p *= shrink;
    const T vi = mu * velocity[i] + g;
    velocity[i] = vi;
    params[i] = p - lr * (nesterov ? g + mu * vi : vi);
  }
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
