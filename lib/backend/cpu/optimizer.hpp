#pragma once
// Optimizer updates over the flat parameter buffer; contracts as Backend::adam_update/sgd_update.
//
// params, grads and the state buffers hold n values; elements [0, n_decay) are weights and get
// weight decay, [n_decay, n) do not. For a decayed element, with g = grads[i]:
//   coupled L2 (s.l2):            g += l2 * p                   (before the update)
//   decoupled (s.decoupled_wd):   p -= lr * wd * p              (before the update, as AdamW)
// Adam (Kingma & Ba, with bias correction; the same form as PyTorch's Adam/AdamW):
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2;
//   p -= lr * m_hat / (sqrt(v_hat) + eps),  m_hat = m/(1-b1^t), v_hat = v/(1-b2^t), t = s.step;
//   i.e. eps is added to sqrt(v_hat), not to sqrt(v). The corrections are computed in double.
// SGD with momentum mu: v = mu*v + g; p -= lr*v; with Nesterov: p -= lr*(g + mu*v) (new v).
// Updates params and state in place; grads are read only.
// Threads: contiguous element ranges, vectorised.

#include <cstddef>

#include "backend/kernel_args.hpp"

namespace mnist::cpu {

template <class T>
void adam_update(std::size_t n, std::size_t n_decay, const OptimizerStep& s, T* params,
                 const T* grads, T* m, T* v, int threads);

// Adam with the per-step values taken from `s` (Backend::adam_update with StepScalars): lr,
// epsilon, the bias corrections and the decoupled decay factor; betas and l2 from `constants`.
void adam_update(std::size_t n, std::size_t n_decay, const OptimizerStep& constants,
                 const StepScalars& s, float* params, const float* grads, float* m, float* v,
                 int threads);

template <class T>
void sgd_update(std::size_t n, std::size_t n_decay, const OptimizerStep& s, T* params,
                const T* grads, T* velocity, int threads);

// SGD with the learning rate and the decoupled decay factor taken from `s` (Backend::sgd_update);
// momentum, nesterov and l2 from `constants`.
void sgd_update(std::size_t n, std::size_t n_decay, const OptimizerStep& constants,
                const StepScalars& s, float* params, const float* grads, float* velocity,
                int threads);

}  // namespace mnist::cpu
