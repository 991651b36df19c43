// The counter-based generator against the published known answers of Philox4x32-10 (Random123's
// kat_vectors, Salmon et al., SC'11): dropout masks, shuffles and shifts are all drawn from it, so
// a change to a round, a constant or the key schedule would change every run's bits without failing
// any comparison of a backend against another (both would use the same wrong generator).
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>

#include "core/rng.hpp"

namespace {

std::array<uint32_t, 4> draw(const std::array<uint32_t, 4>& ctr, uint32_t k0, uint32_t k1) {
  const mnist::Philox4x32 r = mnist::philox4x32(ctr[0], ctr[1], ctr[2], ctr[3], k0, k1);
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}

}  // namespace

TEST_CASE("Philox4x32-10 gives the published known answers", "[rng]") {
  using Words = std::array<uint32_t, 4>;
  CHECK(draw({0, 0, 0, 0}, 0, 0) == Words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(draw({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu) ==
        Words{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(draw({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u, 0x299f31d0u) ==
        Words{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}
