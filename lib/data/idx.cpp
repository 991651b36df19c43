// IDX reader and writer, and the dataset loader built on them.
//
// Files are small (the largest MNIST-format file is 47 MB uncompressed), so each is read whole into
// memory and, if gzip, inflated in one pass; then the header is validated against the byte count.

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/idx.hpp"

namespace mnist {
namespace {

namespace fs = std::filesystem;

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

bool is_gzip(const std::vector<uint8_t>& bytes, size_t at) {
  return bytes.size() >= at + 2 && bytes[at] == 0x1f && bytes[at + 1] == 0x8b;
}

std::vector<uint8_t> read_whole_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) MNIST_THROW(DataError, "data file not found: '{}'", path);
  if (fs::is_directory(path, ec)) {
    MNIST_THROW(DataError, "'{}' is a directory, expected an IDX data file", path);
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) MNIST_THROW(DataError, "cannot open '{}': {}", path, std::strerror(errno));
  std::vector<uint8_t> bytes;
  const auto size = fs::file_size(path, ec);
  // No valid IDX file, raw or compressed, is larger than the largest accepted IDX contents; this
  // also keeps sizes within zlib's 32-bit counters.
  if (!ec && size > kIdxMaxPixels + kIdxImagesHeaderBytes) {
    std::fclose(f);
    MNIST_THROW(DataError,
                "'{}' is {} bytes, larger than any IDX file this tool accepts ({} bytes)", path,
                size, kIdxMaxPixels + kIdxImagesHeaderBytes);
  }
  if (!ec) bytes.resize(size);
  const size_t got = bytes.empty() ? 0 : std::fread(bytes.data(), 1, bytes.size(), f);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed || got != bytes.size()) {
    MNIST_THROW(DataError, "cannot read '{}': got {} of {} bytes", path, got, bytes.size());
  }
  return bytes;
}

// Inflates every gzip member of `in` (gzip allows several, concatenated). Anything after the last
// member that is not another member is an error rather than silently ignored: it means the file is
// not what the writer intended.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& path) {
  std::vector<uint8_t> out;
  // The gzip trailer's ISIZE (last 4 bytes, little-endian, size mod 2^32) is a good first guess for
  // the output size; it is only a hint, the loop below grows the buffer as needed. A truncated file
  // ends in arbitrary bytes, so the hint is capped by deflate's best ratio (1032:1), lest garbage
  // ask for gigabytes.
  if (in.size() >= 18) {
    const size_t n = in.size();
    const uint32_t isize = uint32_t{in[n - 4]} | (uint32_t{in[n - 3]} << 8) |
                           (uint32_t{in[n - 2]} << 16) | (uint32_t{in[n - 1]} << 24);
    const uint64_t cap =
        std::min<uint64_t>(uint64_t{1032} * n, kIdxMaxPixels + kIdxImagesHeaderBytes);
    out.reserve(std::min<uint64_t>(isize, cap));
  }
  size_t member_start = 0;
  while (true) {
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 16) != Z_OK) {  // 15-bit window, +16: expect a gzip wrapper
      MNIST_THROW(DataError, "cannot initialise zlib to read '{}'", path);
    }
    zs.next_in = const_cast<Bytef*>(in.data() + member_start);
    zs.avail_in = static_cast<uInt>(in.size() - member_start);
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      if (out.size() == out.capacity() || out.capacity() - out.size() < 65536) {
        out.reserve(std::max<size_t>(out.capacity() * 2, out.size() + (1u << 20)));
      }
      const size_t before = out.size();
      // zlib counts in uInt (32 bits): hand it at most 1 GiB of room per call.
      const size_t chunk = std::min<size_t>(out.capacity() - before, size_t{1} << 30);
      out.resize(before + chunk);
      zs.next_out = out.data() + before;
      zs.avail_out = static_cast<uInt>(chunk);
      rc = inflate(&zs, Z_NO_FLUSH);
      out.resize(before + (chunk - zs.avail_out));
      if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_MEM_ERROR || rc == Z_STREAM_ERROR) {
        const std::string why = zs.msg != nullptr ? zs.msg : "error code " + std::to_string(rc);
        const size_t at = member_start + zs.total_in;
        inflateEnd(&zs);
        MNIST_THROW(DataError, "corrupt gzip data in '{}' near compressed byte offset {}: {}", path,
                    at, why);
      }
      if (rc != Z_STREAM_END && zs.avail_in == 0 && zs.avail_out != 0) {
        // All input consumed, room left for output, and the stream has not ended: truncated.
        inflateEnd(&zs);
        MNIST_THROW(DataError,
                    "gzip stream in '{}' ends early: {} compressed bytes read, the stream's end "
                    "marker never came (file truncated or download incomplete?)",
                    path, in.size());
      }
      if (out.size() > kIdxMaxPixels + kIdxImagesHeaderBytes) {
        inflateEnd(&zs);
        MNIST_THROW(DataError,
                    "'{}' decompresses to more than {} bytes, larger than any IDX file "
                    "this tool accepts",
                    path, kIdxMaxPixels + kIdxImagesHeaderBytes);
      }
    }
    member_start += zs.total_in;
    inflateEnd(&zs);
    if (member_start == in.size()) break;
    if (!is_gzip(in, member_start)) {
      MNIST_THROW(DataError,
                  "'{}' has {} trailing bytes after its gzip stream (at compressed byte offset {})",
                  path, in.size() - member_start, member_start);
    }
  }
  return out;
}

// The file's bytes, gunzipped when it is gzip (*gz says which, for messages). Moves, never copies,
// the raw bytes: the largest file is 47 MB.
std::vector<uint8_t> read_maybe_gzip(const std::string& path, bool* gz) {
  std::vector<uint8_t> bytes = read_whole_file(path);
  *gz = is_gzip(bytes, 0);
  if (*gz) return gunzip(bytes, path);
  return bytes;
}

std::string hex32(uint32_t v) {
  return fmt::format("0x{:08x}", v);
}

// Checks that the file holds exactly header + data bytes, with a message that says which way it is
// wrong and by how much.
void check_exact_size(const std::string& path, uint64_t expected, uint64_t found,
                      const std::string& header_summary, bool gz) {
  if (expected == found) return;
  const char* what = gz ? "decompressed data holds" : "file holds";
  if (found < expected) {
    MNIST_THROW(DataError,
                "'{}' is truncated: its header ({}) implies {} bytes, but the {} {} bytes "
                "({} bytes missing)",
                path, header_summary, expected, what, found, expected - found);
  }
  MNIST_THROW(DataError,
              "'{}' has trailing bytes: its header ({}) implies {} bytes, but the {} {} bytes "
              "({} bytes too many)",
              path, header_summary, expected, what, found, found - expected);
}

void check_magic(const std::string& path, uint32_t found, uint32_t expected, const char* kind) {
  if (found == expected) return;
  std::string hint;
  if (found == kIdxImagesMagic) hint = " (this is an IDX images file; images and labels swapped?)";
  if (found == kIdxLabelsMagic) hint = " (this is an IDX labels file; images and labels swapped?)";
  if ((found >> 16) == 0x1f8b) hint = " (gzip magic after decompression: compressed twice?)";
  MNIST_THROW(DataError, "bad magic in '{}' at byte offset 0: expected {} (IDX {}), found {}{}",
              path, hex32(expected), kind, hex32(found), hint);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::vector<uint8_t> read_file_maybe_gzip(const std::string& path) {
  bool gz = false;
  return read_maybe_gzip(path, &gz);
}

IdxImages read_idx_images(const std::string& path) {
  bool gz = false;
  const std::vector<uint8_t> bytes = read_maybe_gzip(path, &gz);
  if (bytes.size() < 4) {
    MNIST_THROW(DataError,
                "'{}' is too short for an IDX images file: {} bytes, not even the 4-byte magic",
                path, bytes.size());
  }
  check_magic(path, read_be32(bytes.data()), kIdxImagesMagic, "images: uint8, 3 dimensions");
  if (bytes.size() < kIdxImagesHeaderBytes) {
    MNIST_THROW(DataError,
                "'{}' is too short for an IDX images file: {} bytes, the header alone is {} bytes",
                path, bytes.size(), kIdxImagesHeaderBytes);
  }
  const uint32_t count = read_be32(bytes.data() + 4);
  const uint32_t rows = read_be32(bytes.data() + 8);
  const uint32_t cols = read_be32(bytes.data() + 12);
  const struct {
    const char* name;
    int offset;
    uint32_t value;
  } dims[] = {{"image count", 4, count}, {"rows", 8, rows}, {"cols", 12, cols}};
  for (const auto& d : dims) {
    if (d.value == 0) {
      MNIST_THROW(DataError,
                  "'{}': {} (header field at byte offset {}) is 0; it must be at least 1", path,
                  d.name, d.offset);
    }
  }
  if (rows > kIdxMaxSide || cols > kIdxMaxSide) {
    MNIST_THROW(DataError,
                "'{}': implausible image size {}x{} (rows at byte offset 8, cols at 12); each side "
                "must be at most {} (is this an IDX images file?)",
                path, rows, cols, kIdxMaxSide);
  }
  const uint64_t total = uint64_t{count} * rows * cols;
  if (total > kIdxMaxPixels) {
    MNIST_THROW(DataError, "'{}': {} images of {}x{} make {} pixels, more than the {} supported",
                path, count, rows, cols, total, kIdxMaxPixels);
  }
  check_exact_size(path, kIdxImagesHeaderBytes + total, bytes.size(),
                   fmt::format("{} images of {}x{}", count, rows, cols), gz);
  IdxImages out;
  out.count = static_cast<int>(count);
  out.rows = static_cast<int>(rows);
  out.cols = static_cast<int>(cols);
  out.pixels.assign(bytes.begin() + kIdxImagesHeaderBytes, bytes.end());
  return out;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  bool gz = false;
  const std::vector<uint8_t> bytes = read_maybe_gzip(path, &gz);
  if (bytes.size() < 4) {
    MNIST_THROW(DataError,
                "'{}' is too short for an IDX labels file: {} bytes, not even the 4-byte magic",
                path, bytes.size());
  }
  check_magic(path, read_be32(bytes.data()), kIdxLabelsMagic, "labels: uint8, 1 dimension");
  if (bytes.size() < kIdxLabelsHeaderBytes) {
    MNIST_THROW(DataError,
                "'{}' is too short for an IDX labels file: {} bytes, the header alone is {} bytes",
                path, bytes.size(), kIdxLabelsHeaderBytes);
  }
  const uint32_t count = read_be32(bytes.data() + 4);
  if (count == 0) {
    MNIST_THROW(DataError,
                "'{}': label count (header field at byte offset 4) is 0; it must be at least 1",
                path);
  }
  check_exact_size(path, uint64_t{kIdxLabelsHeaderBytes} + count, bytes.size(),
                   fmt::format("{} labels", count), gz);
  return std::vector<uint8_t>(bytes.begin() + kIdxLabelsHeaderBytes, bytes.end());
}

ImageSet read_idx_pair(const std::string& images_path, const std::string& labels_path,
                       int num_classes) {
  if (num_classes < 1 || num_classes > 256) {
    MNIST_THROW(DataError, "num_classes is {}; IDX uint8 labels allow 1..256", num_classes);
  }
  IdxImages images = read_idx_images(images_path);
  std::vector<uint8_t> labels = read_idx_labels(labels_path);
  if (labels.size() != static_cast<size_t>(images.count)) {
    MNIST_THROW(DataError, "'{}' holds {} images but '{}' holds {} labels; they must match",
                images_path, images.count, labels_path, labels.size());
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= num_classes) {
      MNIST_THROW(DataError,
                  "'{}': label {} at byte offset {} (label index {}) is out of range; with {} "
                  "classes labels must be 0..{}",
                  labels_path, labels[i], kIdxLabelsHeaderBytes + i, i, num_classes,
                  num_classes - 1);
    }
  }
  ImageSet set;
  set.count = images.count;
  set.rows = images.rows;
  set.cols = images.cols;
  set.pixels = std::move(images.pixels);
  set.labels = std::move(labels);
  set.images_path = images_path;
  set.labels_path = labels_path;
  return set;
}

void write_idx_images(const std::string& path, int count, int rows, int cols,
                      const std::vector<uint8_t>& pixels) {
  MNIST_CHECK(count > 0 && rows > 0 && cols > 0, "IDX images need positive dims, got {} of {}x{}",
              count, rows, cols);
  MNIST_CHECK(pixels.size() == size_t(count) * rows * cols,
              "{} pixels given for {} images of {}x{}", pixels.size(), count, rows, cols);
  std::vector<uint8_t> bytes;
  bytes.reserve(kIdxImagesHeaderBytes + pixels.size());
  put_be32(bytes, kIdxImagesMagic);
  put_be32(bytes, static_cast<uint32_t>(count));
  put_be32(bytes, static_cast<uint32_t>(rows));
  put_be32(bytes, static_cast<uint32_t>(cols));
  bytes.insert(bytes.end(), pixels.begin(), pixels.end());
  write_file_atomically(path, bytes.data(), bytes.size());
}

void write_idx_labels(const std::string& path, const std::vector<uint8_t>& labels) {
  MNIST_CHECK(!labels.empty(), "IDX labels file '{}' would be empty", path);
  std::vector<uint8_t> bytes;
  bytes.reserve(kIdxLabelsHeaderBytes + labels.size());
  put_be32(bytes, kIdxLabelsMagic);
  put_be32(bytes, static_cast<uint32_t>(labels.size()));
  bytes.insert(bytes.end(), labels.begin(), labels.end());
  write_file_atomically(path, bytes.data(), bytes.size());
}

std::string read_provenance(const std::string& dir) {
  const fs::path file = fs::path(dir) / kProvenanceFile;
  std::error_code ec;
  if (!fs::exists(file, ec)) return "";
  std::ifstream in(file);
  if (!in) MNIST_THROW(DataError, "cannot open '{}': {}", file.string(), std::strerror(errno));
  std::string line, source, fetched;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    const auto colon = t.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(t.substr(0, colon));
    if (key == "source") source = trim(t.substr(colon + 1));
    if (key == "fetched") fetched = trim(t.substr(colon + 1));
  }
  if (source.empty()) {
    MNIST_THROW(
        DataError,
        "'{}' has no 'source: ...' line; rewrite it with scripts/fetch_data.sh or delete it",
        file.string());
  }
  return fetched.empty() ? source : fmt::format("{} (fetched {})", source, fetched);
}

void hold_out_first(ImageSet& set, int n) {
  MNIST_CHECK(n >= 0 && n <= set.count, "cannot hold out {} of {} images", n, set.count);
  const std::size_t pixels = static_cast<std::size_t>(set.pixels_per_image());
  set.pixels.erase(set.pixels.begin(),
                   set.pixels.begin() + static_cast<std::ptrdiff_t>(n * pixels));
  set.labels.erase(set.labels.begin(), set.labels.begin() + n);
  set.count -= n;
}

Dataset load_dataset(const DataConfig& cfg, int num_classes) {
  const std::string dir = cfg.dir.empty() ? "data/" + cfg.dataset : cfg.dir;
  struct Want {
    const char* key;  // config key, for messages
    const std::string* explicit_path;
    const char* standard;  // standard file name inside dir
    std::string resolved;
  };
  Want wants[] = {{"data.train_images", &cfg.train_images, kTrainImages, {}},
                  {"data.train_labels", &cfg.train_labels, kTrainLabels, {}},
                  {"data.test_images", &cfg.test_images, kTestImages, {}},
                  {"data.test_labels", &cfg.test_labels, kTestLabels, {}}};
  std::vector<std::string> missing;
  std::error_code ec;
  for (Want& w : wants) {
    if (!w.explicit_path->empty()) {
      // An explicit path is taken literally: guessing a .gz beside it would hide a typo.
      if (fs::exists(*w.explicit_path, ec)) {
        w.resolved = *w.explicit_path;
      } else {
        missing.push_back(fmt::format("'{}' (from {})", *w.explicit_path, w.key));
      }
      continue;
    }
    const fs::path plain = fs::path(dir) / w.standard;
    const fs::path gz = fs::path(dir) / (std::string(w.standard) + ".gz");
    if (fs::exists(plain, ec)) {
      w.resolved = plain.string();
    } else if (fs::exists(gz, ec)) {
      w.resolved = gz.string();
    } else {
      missing.push_back(fmt::format("'{}' (or '{}.gz')", plain.string(), w.standard));
    }
  }
  if (!missing.empty()) {
    std::ostringstream list;
    for (size_t i = 0; i < missing.size(); ++i) list << (i ? ", " : "") << missing[i];
    const bool fetchable =
        cfg.dataset == "mnist" || cfg.dataset == "mnist-small" || cfg.dataset == "fashion-mnist";
    const std::string advice =
        fetchable ? fmt::format(
                        "run `scripts/fetch_data.sh {}` to fetch them, or point data.dir / "
                        "data.train_images etc. at existing files",
                        cfg.dataset)
                  : std::string(
                        "put the four IDX files (train-images-idx3-ubyte, "
                        "train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
                        "t10k-labels-idx1-ubyte, raw or .gz) in data.dir, or set "
                        "data.train_images etc.");
    MNIST_THROW(DataError, "dataset '{}': {} of 4 data files missing: {}; {}", cfg.dataset,
                missing.size(), list.str(), advice);
  }
  Dataset ds;
  ds.name = cfg.dataset;
  ds.train = read_idx_pair(wants[0].resolved, wants[1].resolved, num_classes);
  ds.test = read_idx_pair(wants[2].resolved, wants[3].resolved, num_classes);
  if (ds.train.rows != ds.test.rows || ds.train.cols != ds.test.cols) {
    MNIST_THROW(DataError,
                "train images '{}' are {}x{} but test images '{}' are {}x{}; they must match",
                ds.train.images_path, ds.train.rows, ds.train.cols, ds.test.images_path,
                ds.test.rows, ds.test.cols);
  }
  if (cfg.validation_size > 0) {
    if (cfg.validation_size >= ds.train.count) {
      MNIST_THROW(DataError,
                  "data.validation_size is {} but '{}' holds {} images; it must leave at least one "
                  "to train on",
                  cfg.validation_size, ds.train.images_path, ds.train.count);
    }
    hold_out_first(ds.train, cfg.validation_size);
  }
  ds.provenance = read_provenance(dir);
  return ds;
}

}  // namespace mnist
