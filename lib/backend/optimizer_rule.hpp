#pragma once
// The per-element optimizer updates, written once for the CPU and CUDA twins so both apply exactly
// the same arithmetic. Weight decay applies only to decayed elements (conv/dense kernels):
//   coupled L2:      g += l2 * p                     (the L2 term of the loss)
//   decoupled (W):   p *= shrink, shrink = 1 - lr*wd (AdamW), before the update
// Adam (Kingma & Ba, with eps added to sqrt(v_hat) as PyTorch does):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr * (m c1) / (sqrt(v c2) + eps),
//   c1 = 1/(1-b1^t), c2 = 1/(1-b2^t) computed once per step on the host.
// SGD: v = mu v + g;  p -= lr * v, or with Nesterov p -= lr * (g + mu v).

#include <cmath>
#include <cstdint>

#include "backend/kernel_args.hpp"
#include "core/host_device.hpp"

namespace mnist {

template <class T>
struct DecayRule {
  T l2, shrink;
};

// Host side, once per step.
template <class T>
inline DecayRule<T> decay_rule(const OptimizerStep& s) {
  return DecayRule<T>{static_cast<T>(s.l2),
                      T(1) - static_cast<T>(s.lr) * static_cast<T>(s.decoupled_wd)};
}
// 1 / (1 - beta^step), in double so that early steps keep their precision. beta^step by squaring:
// only IEEE multiplications, so the host and a GPU (which advances a captured step's values,
// step_scalars_next) get the same bits, which a library pow does not promise.
MNIST_HD double adam_bias_correction(float beta, int64_t step) {
  double power = 1.0, base = static_cast<double>(beta);
  for (int64_t e = step; e > 0; e /= 2) {
    if (e % 2) power *= base;
    base *= base;
  }
  return 1.0 / (1.0 - power);
}

template <class T>
MNIST_HD T optimizer_sqrt(T x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

// Adam's epsilon for step t (1-based): as given, or in TensorFlow 1's style, added to sqrt(v)
// before the bias corrections scale the step, which is epsilon * sqrt(1 / (1 - beta2^t)) added to
// sqrt(v_hat).
MNIST_HD float adam_epsilon(double epsilon, bool tensorflow_style, float beta2, int64_t t) {
  return tensorflow_style
             ? static_cast<float>(epsilon * optimizer_sqrt(adam_bias_correction(beta2, t)))
             : static_cast<float>(epsilon);
}

// The terms of StepScalars that follow the step number: 0-based `step`, and the bias corrections
// and epsilon of the optimizer's t = step + 1.
MNIST_HD void set_step_terms(StepScalars& s, int64_t step, float beta1, float beta2, double epsilon,
                             bool tensorflow_epsilon) {
  s.step = step;
  s.c1 = static_cast<float>(adam_bias_correction(beta1, step + 1));
  s.c2 = static_cast<float>(adam_bias_correction(beta2, step + 1));
  s.epsilon = adam_epsilon(epsilon, tensorflow_epsilon, beta2, step + 1);
}

// The values of 0-based step `step`, as the host sets them: the learning rate and decay factor of
// `o`, the step terms of `step` (`epsilon` as configured: the TensorFlow style scales it here).
inline StepScalars step_scalars_at(const OptimizerStep& o, int64_t step, double epsilon,
                                   bool tensorflow_epsilon) {
  StepScalars s;
  s.lr = o.lr;
  s.shrink = decay_rule<float>(o).shrink;
  set_step_terms(s, step, o.beta1, o.beta2, epsilon, tensorflow_epsilon);
  return s;
}

// The values of the step after `s`: the step terms move on; the learning rate and the decay
// factor stay (the host sets them anew when its schedule changes them). The same function on the
// host and on the device.
MNIST_HD StepScalars step_scalars_next(StepScalars s, float beta1, float beta2, double epsilon,
                                       bool tensorflow_epsilon) {
  set_step_terms(s, s.step + 1, beta1, beta2, epsilon, tensorflow_epsilon);
  return s;
}

// Updates params[i], m[i], v[i] in place.
template <class T>
MNIST_HD void adam_element(bool decay, DecayRule<T> d, T lr, T b1, T b2, T eps, T c1, T c2, T& p,
                           T g, T& m, T& v) {
  if (decay) {
    g += d.l2 * p;
    p *= d.shrink;
  }
  m = b1 * m + (T(1) - b1) * g;
  v = b2 * v + (T(1) - b2) * g * g;
  p -= lr * (m * c1) / (optimizer_sqrt(v * c2) + eps);
}

// Updates params[i] and velocity[i] in place.
template <class T>
MNIST_HD void sgd_element(bool decay, DecayRule<T> d, T lr, T mu, bool nesterov, T& p, T g,
                          T& velocity) {
  if (decay) {
    g += d.l2 * p;
    p *= d.shrink;
  }
  velocity = mu * velocity + g;
  p -= lr * (nesterov ? g + mu * velocity : velocity);
}

}  // namespace mnist
