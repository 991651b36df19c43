#pragma once
// The batch-norm statistics, written once for the CPU and CUDA twins so that mean, invstd and the
// running statistics come out bit-identical on both, step after step (backend.hpp states the
// contract):
//   mean = sum / count,  var = sumsq / count - mean^2 (biased; clamped at 0),
//   invstd = 1 / sqrt(var + epsilon),
//   running = decay * running + (1 - decay) * batch   (batch: mean, or var * count / (count - 1)),
// all in double, each result rounded to the stored type once at the end.
//
// Every a*b + c below is an explicit fma (one rounding on both sides): a compiler may or may not
// fuse a plain `a*b + c` (nvcc fuses by default, the host build does not), so the same source line
// could round differently on the two twins. No other product feeds an addition.
// decay * running: two floats, so the product is exact in double (24 + 24 significant bits < 53)
// and fma(decay, running, t) equals decay*running + t rounded once, which is what the CPU twin
// computed before this rule. The CUDA twin once multiplied decay * running in float, rounding the
// product to 24 bits first, and drifted from the CPU by an ulp now and then, more with each step.

#include <cmath>

#include "core/host_device.hpp"

namespace mnist {

MNIST_HD double batch_norm_fma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// 1 / sqrt(var + epsilon): division and square root are correctly rounded on both sides.
MNIST_HD double batch_norm_invstd(double var, float epsilon) {
#if defined(__CUDA_ARCH__)
  return 1.0 / sqrt(var + static_cast<double>(epsilon));
#else
  return 1.0 / std::sqrt(var + static_cast<double>(epsilon));
#endif
}

// One channel of Backend::batch_norm_finalize: from the sums over `count` values, assigns mean and
// invstd and updates running_mean / running_var in place. T is float (both backends) or double
// (the CPU's gradient checks).
template <class T>
MNIST_HD void batch_norm_finalize_channel(double count, double sum, double sumsq, float epsilon,
                                          float decay, T& mean, T& invstd, T& running_mean,
                                          T& running_var) {
  const double m = sum / count;
  double var = batch_norm_fma(-m, m, sumsq / count);
  if (var < 0) var = 0;  // E[x^2] - E[x]^2 dips below zero by rounding when the variance is tiny
  const double unbiased = count > 1 ? var * count / (count - 1) : var;
  const double d = static_cast<double>(decay);
  mean = static_cast<T>(m);
  invstd = static_cast<T>(batch_norm_invstd(var, epsilon));
  running_mean = static_cast<T>(batch_norm_fma(d, static_cast<double>(running_mean), (1 - d) * m));
  running_var =
      static_cast<T>(batch_norm_fma(d, static_cast<double>(running_var), (1 - d) * unbiased));
}

}  // namespace mnist
