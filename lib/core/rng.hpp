#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11), usable on host and device.
//
// A random value is a pure function of (key, counter): no state, no order dependence. The trainer
// keys every draw by what it means, never by who computes it:
//   dropout mask  : key = (seed, layer),   counter = (step, global sample index, element, stream)
//   data order    : key = (seed, epoch),   counter = (position, ...)
//   initial weight: key = (seed, stream),  counter = (parameter index, ...)
// so 1, 2 or 8 workers, CPU or GPU, draw exactly the same numbers.

#include <cstdint>

#include "core/host_device.hpp"

namespace mnist {

struct Philox4x32 {
  uint32_t v[4];
};

MNIST_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

// Ten rounds of Philox4x32 on counter `ctr` with 64-bit key (k0, k1).
MNIST_HD Philox4x32 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                               uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo32(kMul0, c0, &hi0);
    const uint32_t lo1 = mulhilo32(kMul1, c2, &hi1);
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return Philox4x32{{c0, c1, c2, c3}};
}

// Uniform float in [0, 1) from the top 24 bits of a 32-bit draw (exactly representable, same on
// host and device).
MNIST_HD float uniform01(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// A key built from a 64-bit seed and a 32-bit purpose tag.
struct RngKey {
  uint32_t k0, k1;
};
MNIST_HD RngKey make_rng_key(uint64_t seed, uint32_t purpose) {
  return RngKey{static_cast<uint32_t>(seed) ^ (purpose * 0x85EBCA6Bu),
                static_cast<uint32_t>(seed >> 32) ^ 0x2545F491u ^ purpose};
}

}  // namespace mnist
