#include "data/augment.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace mnist {

PixelShift random_shift_for(uint64_t seed, int64_t step, int64_t sample, int max_shift) {
  MNIST_CHECK(max_shift >= 0, "max_shift {} < 0", max_shift);
  if (max_shift == 0) return {};
  // Purpose tag 0x5000: distinct from initialisation (0x1000+), dropout (0x2000+), data order
  // (0x3000) and benchmarks (0x4000).
  const RngKey key = make_rng_key(seed, 0x5000u);
  const Philox4x32 r = philox4x32(static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32),
                                  static_cast<uint32_t>(sample),
                                  static_cast<uint32_t>(sample >> 32), key.k0, key.k1);
  const uint32_t span = 2u * static_cast<uint32_t>(max_shift) + 1u;
  // The modulo bias is below span / 2^32, far under anything training could notice.
  return PixelShift{static_cast<int>(r.v[0] % span) - max_shift,
                    static_cast<int>(r.v[1] % span) - max_shift};
}

void shift_image(const uint8_t* src, uint8_t* dst, int rows, int cols, PixelShift s) {
  std::memset(dst, 0, static_cast<std::size_t>(rows) * cols);
  // Destination rows [y0, y1) and columns [x0, x1) have a source pixel.
  const int y0 = std::max(0, s.dy), y1 = std::min(rows, rows + s.dy);
  const int x0 = std::max(0, s.dx), x1 = std::min(cols, cols + s.dx);
  if (x1 <= x0) return;
  for (int y = y0; y < y1; ++y) {
    std::memcpy(dst + static_cast<std::size_t>(y) * cols + x0,
                src + static_cast<std::size_t>(y - s.dy) * cols + (x0 - s.dx),
                static_cast<std::size_t>(x1 - x0));
  }
}

void gather_shifted(const ImageSet& set, const int32_t* indices, int n, uint64_t seed, int64_t step,
                    int64_t first_sample, int max_shift, std::vector<uint8_t>& pixels,
                    std::vector<uint8_t>& labels) {
  const std::size_t per_image = static_cast<std::size_t>(set.pixels_per_image());
  pixels.resize(per_image * n);
  labels.resize(n);
  for (int i = 0; i < n; ++i) {
    const int32_t index = indices[i];
    MNIST_CHECK(index >= 0 && index < set.count, "sample index {} outside [0, {})", index,
                set.count);
    shift_image(set.pixels.data() + per_image * index, pixels.data() + per_image * i, set.rows,
                set.cols, random_shift_for(seed, step, first_sample + i, max_shift));
    labels[i] = set.labels[index];
  }
}

}  // namespace mnist
