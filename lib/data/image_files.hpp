#pragma once
// Images to classify with `mnist-train predict`: an IDX image file (raw or gzip, any count) or a
// binary PGM (P5, 8-bit) holding one image. Labels of the returned set are zero (unknown).

#include <string>

#include "data/dataset.hpp"

namespace mnist {

// Throws DataError naming the file and what is wrong (not IDX/PGM, bad header, wrong size).
ImageSet read_images_for_prediction(const std::string& path);

}  // namespace mnist
