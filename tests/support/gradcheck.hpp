#pragma once
// Finite-difference gradient checks and deterministic test data for kernel tests.
//
// House rule: in double, central differences with step 1e-5 and tolerance
// 1e-6 * max(1, |g|) where g is the numeric gradient.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace mnist::test {

constexpr double kFiniteDifferenceStep = 1e-5;
constexpr double kGradientTolerance = 1e-6;

// n values uniform in [lo, hi), reproducible from `seed` on every platform (no std distributions).
inline std::vector<double> random_values(std::size_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 gen(seed);
  std::vector<double> v(n);
  for (auto& x : v) x = lo + (hi - lo) * static_cast<double>(gen() >> 11) * 0x1.0p-53;
  return v;
}

// Same values away from zero: magnitudes in [gap, gap + spread), random signs. Keeps kinks (ReLU at
// 0) further from every value than the finite-difference step.
inline std::vector<double> random_away_from_zero(std::size_t n, uint64_t seed, double gap,
                                                 double spread) {
  auto v = random_values(n, seed, -spread, spread);
  for (auto& x : v) x = x < 0 ? x - gap : x + gap;
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

template <class T>
std::vector<T> cast_to(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Central-difference gradient of loss() with respect to every element of `param` (perturbed in
// place and restored exactly).
template <class Loss>
std::vector<double> numeric_gradient(std::vector<double>& param, Loss&& loss,
                                     double step = kFiniteDifferenceStep) {
  std::vector<double> g(param.size());
  for (std::size_t i = 0; i < param.size(); ++i) {
    const double saved = param[i];
    param[i] = saved + step;
    const double up = loss();
    param[i] = saved - step;
    const double down = loss();
    param[i] = saved;
    g[i] = (up - down) / (2 * step);
  }
  return g;
}

// Requires |analytic - numeric| <= tol * max(1, |numeric|) for every element; on failure reports
// how many elements failed and the worst one.
inline void check_gradient(const std::vector<double>& analytic, const std::vector<double>& numeric,
                           const std::string& what, double tol = kGradientTolerance) {
  REQUIRE(analytic.size() == numeric.size());
  std::size_t failures = 0, worst = 0;
  double worst_ratio = 0;
  for (std::size_t i = 0; i < numeric.size(); ++i) {
    const double err = std::abs(analytic[i] - numeric[i]);
    const double ratio = err / (tol * std::max(1.0, std::abs(numeric[i])));
    // NaN (an unwritten, poisoned element) must count as a failure.
    if (!(ratio <= 1.0)) ++failures;
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  INFO(what << ": " << failures << " of " << numeric.size() << " elements out of tolerance; worst "
            << "index " << worst << " analytic " << analytic[worst] << " numeric "
            << numeric[worst]);
  CHECK(failures == 0);
}

// Requires |a - b| <= atol + rtol * |b| elementwise (float kernel a against double reference b).
template <class A, class B>
void check_close(const std::vector<A>& a, const std::vector<B>& b, double atol, double rtol,
                 const std::string& what) {
  REQUIRE(a.size() == b.size());
  std::size_t failures = 0, first = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (!(d <= atol + rtol * std::abs(static_cast<double>(b[i])))) {
      if (failures++ == 0) first = i;
    }
  }
  INFO(what << ": " << failures << " of " << a.size() << " elements differ; first at " << first
            << ": " << (a.empty() ? 0.0 : static_cast<double>(a[first])) << " vs "
            << (b.empty() ? 0.0 : static_cast<double>(b[first])));
  CHECK(failures == 0);
}

template <class T>
std::vector<T> poisoned(std::size_t n) {
  return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
}

}  // namespace mnist::test
