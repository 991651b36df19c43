#pragma once
// Input augmentation in the data path, the same for every backend: random shifts of training
// images by a few pixels, applied on the host while a replica's slice of the batch is gathered,
// before it is copied to the device. The shift of an image is a pure function of
// (seed, step, position in the global batch), like the dropout masks, so W workers and 1 worker
// train on the same shifted images and a resumed run continues exactly.

#include <cstdint>
#include <vector>

#include "data/dataset.hpp"

namespace mnist {

struct PixelShift {
  int dx = 0, dy = 0;  // right and down, in pixels
};

// dx and dy each uniform in [-max_shift, max_shift], drawn from (seed, step, sample).
PixelShift random_shift_for(uint64_t seed, int64_t step, int64_t sample, int max_shift);

// dst[y][x] = src[y - dy][x - dx] where that pixel exists, else 0 (MNIST's background).
void shift_image(const uint8_t* src, uint8_t* dst, int rows, int cols, PixelShift s);

// The training slice of one replica, shifted: images indices[0, n) of `set`, image i shifted by
// random_shift_for(seed, step, first_sample + i, max_shift), into pixels [n, rows * cols] and
// labels [n] (both resized).
void gather_shifted(const ImageSet& set, const int32_t* indices, int n, uint64_t seed, int64_t step,
                    int64_t first_sample, int max_shift, std::vector<uint8_t>& pixels,
                    std::vector<uint8_t>& labels);

}  // namespace mnist
