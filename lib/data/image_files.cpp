#include "data/image_files.hpp"

#include <cctype>

#include "core/error.hpp"
#include "data/idx.hpp"

namespace mnist {

namespace {

// Binary PGM: "P5" whitespace width whitespace height whitespace maxval, one whitespace byte, then
// width*height bytes (maxval <= 255). '#' comments may appear between header fields.
ImageSet read_pgm(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::size_t pos = 2;
  auto next_number = [&](const char* field) {
    for (;;) {
      while (pos < bytes.size() && std::isspace(bytes[pos])) ++pos;
      if (pos < bytes.size() && bytes[pos] == '#') {
        while (pos < bytes.size() && bytes[pos] != '\n') ++pos;
        continue;
      }
      break;
    }
    const std::size_t start = pos;
    long value = 0;
    while (pos < bytes.size() && std::isdigit(bytes[pos]) && pos - start < 9)
      value = value * 10 + (bytes[pos++] - '0');
    if (pos == start || value <= 0)
      MNIST_THROW(DataError,
                  "'{}': PGM header field {} at byte offset {} is not a positive integer", path,
                  field, start);
    return value;
  };
  const long width = next_number("width"), height = next_number("height"),
             maxval = next_number("maxval");
  if (maxval > 255)
    MNIST_THROW(DataError,
                "'{}': PGM maxval {} is not supported (8-bit images only, maxval <= 255)", path,
                maxval);
  ++pos;  // the single whitespace byte after maxval
  const std::size_t expected = static_cast<std::size_t>(width) * height;
  if (bytes.size() < pos || bytes.size() - pos != expected)
    MNIST_THROW(DataError, "'{}': a {}x{} PGM needs {} pixel bytes after its header, found {}",
                path, width, height, expected, bytes.size() < pos ? 0 : bytes.size() - pos);
  ImageSet set;
  set.count = 1;
  set.rows = static_cast<int>(height);
  set.cols = static_cast<int>(width);
  set.images_path = path;
  set.pixels.assign(bytes.begin() + pos, bytes.end());
  if (maxval != 255)  // rescale to the 0..255 range the network was trained on
    for (uint8_t& p : set.pixels) p = static_cast<uint8_t>((p * 255 + maxval / 2) / maxval);
  set.labels.assign(1, 0);
  return set;
}

}  // namespace

ImageSet read_images_for_prediction(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_prefix(path, 4);
  // A PGM's header is text of a few dozen bytes, and its sides are IDX's at most.
  if (bytes.size() >= 2 && bytes[0] == 'P' && bytes[1] == '5')
    return read_pgm(path, read_file_maybe_gzip(path, uint64_t{kIdxMaxSide} * kIdxMaxSide + 4096));
  if (bytes.size() >= 4 && bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 8 && bytes[3] == 3) {
    IdxImages idx = read_idx_images(path);
    ImageSet set;
    set.count = idx.count;
    set.rows = idx.rows;
    set.cols = idx.cols;
    set.images_path = path;
    set.pixels = std::move(idx.pixels);
    set.labels.assign(set.count, 0);
    return set;
  }
  MNIST_THROW(
      DataError,
      "'{}' is neither an IDX image file (magic 0x00000803) nor a binary PGM (P5): the first "
      "bytes are {:02x} {:02x}",
      path, bytes.size() > 0 ? bytes[0] : 0, bytes.size() > 1 ? bytes[1] : 0);
}

}  // namespace mnist
