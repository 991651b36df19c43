#pragma once
// FNV-1a, 64 bit: the one fingerprint of the project (the checkpoint's math-config hash, and the
// check that every MPI rank runs the same experiment on the same data). A fingerprint to compare
// copies, not a defence against anyone. fnv1a("") is the offset basis; fnv1a("a")
// 0xaf63dc4c8601ec8c.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mnist {

inline constexpr uint64_t kFnv1aOffsetBasis = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1aPrime = 0x100000001b3ull;

// Continues `hash` over `bytes` bytes at `data`, so several buffers hash as one.
inline uint64_t fnv1a(const void* data, std::size_t bytes, uint64_t hash = kFnv1aOffsetBasis) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * kFnv1aPrime;
  return hash;
}

inline uint64_t fnv1a(std::string_view text, uint64_t hash = kFnv1aOffsetBasis) {
  return fnv1a(text.data(), text.size(), hash);
}

}  // namespace mnist
