#pragma once
// MNIST-format datasets in memory: uint8 pixels and labels, exactly as stored in IDX files.

#include <cstdint>
#include <string>
#include <vector>

#include "config/experiment.hpp"

namespace mnist {

// One split (train or test): count images of rows x cols pixels, row-major, one byte each.
struct ImageSet {
  int count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // [count, rows * cols]
  std::vector<uint8_t> labels;  // [count], each < num_classes
  std::string images_path, labels_path;
  int pixels_per_image() const { return rows * cols; }
};

// The splits a run evaluates: the validation split (data.validation_size images held out of the
// training files) during training, the test set at the end (or during training without one).
enum class EvalSplit { validation, test };
inline const char* to_string(EvalSplit s) {
  return s == EvalSplit::validation ? "validation" : "test";
}

struct Dataset {
  ImageSet train;
  ImageSet validation;  // the first data.validation_size training images; count 0 without them
  ImageSet test;
  std::string name;        // "mnist", "fashion-mnist", ...
  std::string provenance;  // one line: where the files came from (from the dir's provenance file)

  const ImageSet& split(EvalSplit s) const {
    return s == EvalSplit::validation ? validation : test;
  }
};

// IDX files (raw or gzip; gzip is detected by its magic bytes, not the file name).
// Validates magic (0x00000803 images, 0x00000801 labels), dimensions, exact size. Throws DataError
// naming the file, the byte offset or field, what was expected and what was found.
ImageSet read_idx_pair(const std::string& images_path, const std::string& labels_path,
                       int num_classes);

// Resolves the four files of `cfg` (explicit paths, else <dir>/<standard name> or <name>.gz) and
// reads both files' sets; checks that train and test images have the same size. Moves the first
// cfg.validation_size training images into `validation` (TensorFlow 1's validation split): the
// training set no longer holds them, so no sampler can draw them.
Dataset load_dataset(const DataConfig& cfg, int num_classes);

// Checks that `set`'s images are what a model with model.input [c, h, w] reads: every image file
// this tool reads (IDX uint8, PGM) has one channel, so c must be 1, and h x w must be the images'
// rows x cols. Throws DataError naming the file, its image size and model.input.
void check_images_fit_model(const ImageSet& set, int c, int h, int w);

// Removes the first n images of `set` (0 <= n <= count) and returns them, in order, as a set of
// their own (same size and file paths).
ImageSet split_off_first(ImageSet& set, int n);

// Standard file names.
inline constexpr const char* kTrainImages = "train-images-idx3-ubyte";
inline constexpr const char* kTrainLabels = "train-labels-idx1-ubyte";
inline constexpr const char* kTestImages = "t10k-images-idx3-ubyte";
inline constexpr const char* kTestLabels = "t10k-labels-idx1-ubyte";

}  // namespace mnist
