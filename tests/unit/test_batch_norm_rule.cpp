// The batch-norm statistics rule (backend/batch_norm_rule.hpp) that the CPU and CUDA twins share:
// why its arithmetic is written as it is, checked on the CPU. The GPU test "batch norm running
// statistics are bit-identical to the CPU over 100 updates" checks the CUDA twin against it.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "backend/batch_norm_rule.hpp"
#include "backend/cpu/batch_norm.hpp"

using namespace mnist;

namespace {

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Kept in memory between the operations, so the compiler cannot fuse them: the arithmetic the
// CPU twin used before the rule, and what an unfused a*b + c rounds to.
double unfused(double a, double b, double c) {
  volatile double product = a * b;
  volatile double sum = product + c;
  return sum;
}

}  // namespace

TEST_CASE("batch norm rule: decay * running is exact in double, so the update rounds once",
          "[cpu][batch_norm]") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> decay_dist(0.0f, 1.0f), running_dist(-4.0f, 4.0f);
  std::uniform_real_distribution<double> batch_dist(-4.0, 4.0);
  for (int i = 0; i < 100000; ++i) {
    const float decay = decay_dist(rng), running = running_dist(rng);
    const double batch = batch_dist(rng), d = decay;
    // The product of two floats has at most 48 significant bits: its rounding error is zero.
    REQUIRE(std::fma(d, double(running), -(d * running)) == 0.0);
    // Hence the fused form equals the separate product and sum (the CPU's former arithmetic).
    // count 8: sum / count gives back `batch` exactly.
    float mean = 0, invstd = 0, rm = running, rv = 1.0f;
    batch_norm_finalize_channel(8.0, 8.0 * batch, 8.0 * (batch * batch + 1.0), 1e-3f, decay, mean,
                                invstd, rm, rv);
    REQUIRE(bits(rm) == bits(static_cast<float>(unfused(d, running, (1 - d) * batch))));
  }
}

TEST_CASE("batch norm rule: a float product or an unfused variance would round differently",
          "[cpu][batch_norm]") {
  // What the rule guards against. (1) The CUDA twin once computed decay * running in float: over
  // 100 updates its running mean leaves the rule's. (2) sumsq/count - mean^2 rounds differently
  // fused and unfused, and nvcc fuses a plain a*b + c unless told otherwise: hence the explicit
  // fma.
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> batch_dist(-2.0, 2.0);
  const float decay = 0.9f;
  int runs_apart = 0;
  for (int run = 0; run < 20; ++run) {
    float rule = 0.0f, float_product = 0.0f;
    for (int step = 0; step < 100; ++step) {
      const double m = batch_dist(rng);
      float mean = 0, invstd = 0, rv = 1.0f;
      batch_norm_finalize_channel(4.0, 4.0 * m, 4.0 * (m * m + 1.0), 1e-3f, decay, mean, invstd,
                                  rule, rv);
      const float product = decay * float_product;  // rounded to float
      volatile double share = (1.0 - decay) * m;
      float_product = static_cast<float>(static_cast<double>(product) + share);
    }
    if (bits(rule) != bits(float_product)) ++runs_apart;
  }
  INFO(runs_apart << " of 20 runs of 100 updates end with another running mean");
  CHECK(runs_apart > 0);

  int fused_differs = 0;
  for (int i = 0; i < 10000; ++i) {
    const double m = batch_dist(rng), q = m * m + std::abs(batch_dist(rng)) * 1e-6;
    if (std::fma(-m, m, q) != unfused(-m, m, q)) ++fused_differs;
  }
  INFO(fused_differs << " of 10000 variances differ between fused and unfused");
  CHECK(fused_differs > 0);
}

TEST_CASE("the CPU batch norm finalize is the rule, channel by channel, over 100 updates",
          "[cpu][batch_norm]") {
  const int c = 7;
  const double count = 33 * 25;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-1.0f, 2.0f);
  std::vector<float> rm(c, 0.0f), rv(c, 1.0f), mean(c), invstd(c);
  std::vector<float> rule_rm = rm, rule_rv = rv;
  for (int step = 0; step < 100; ++step) {
    std::vector<float> sum(c), sumsq(c);
    for (int ch = 0; ch < c; ++ch) {
      const float m = value(rng);
      sum[ch] = static_cast<float>(m * count);
      sumsq[ch] = static_cast<float>((m * m + 0.25 * value(rng) * value(rng)) * count);
    }
    cpu::batch_norm_finalize(c, count, sum.data(), sumsq.data(), 1e-3f, 0.9f, mean.data(),
                             invstd.data(), rm.data(), rv.data());
    for (int ch = 0; ch < c; ++ch) {
      float rule_mean = NAN, rule_invstd = NAN;
      batch_norm_finalize_channel(count, double(sum[ch]), double(sumsq[ch]), 1e-3f, 0.9f, rule_mean,
                                  rule_invstd, rule_rm[ch], rule_rv[ch]);
      INFO("step " << step << ", channel " << ch);
      REQUIRE(bits(mean[ch]) == bits(rule_mean));
      REQUIRE(bits(invstd[ch]) == bits(rule_invstd));
      REQUIRE(bits(rm[ch]) == bits(rule_rm[ch]));
      REQUIRE(bits(rv[ch]) == bits(rule_rv[ch]));
    }
  }
}
