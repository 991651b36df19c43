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
#include "core/host_memory.hpp"
#include "core/input_file.hpp"
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

// A data file's contents, raw or gunzipped (gzip is recognised by its magic bytes, not the name),
// read in order and never more than the caller asks for: a reader asks for what a header
// promises plus one byte, so neither a gzip bomb nor a wrong header can make it hold more.
// Gzip allows several members, concatenated; anything after the last one that is not another
// member is an error rather than silently ignored (the file is not what the writer intended).
class ContentStream {
 public:
  explicit ContentStream(const std::string& path) : file_(path, "data file") {
    in_.resize(kInputChunk);
    refill();
    gz_ = avail_ >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gz_ && inflateInit2(&zs_, 15 + 16) != Z_OK)  // 15-bit window, +16: a gzip wrapper
      MNIST_THROW(DataError, "cannot initialise zlib to read '{}'", path);
  }
  ~ContentStream() {
    if (gz_) inflateEnd(&zs_);
  }
  ContentStream(const ContentStream&) = delete;
  ContentStream& operator=(const ContentStream&) = delete;

  bool gzip() const { return gz_; }
  uint64_t file_size() const { return file_.size(); }

  // Up to n bytes of contents into dst; fewer only at the end.
  std::size_t read(uint8_t* dst, std::size_t n) {
    if (!gz_) {
      const std::size_t buffered = std::min(n, avail_);
      std::memcpy(dst, in_.data() + pos_, buffered);
      pos_ += buffered;
      avail_ -= buffered;
      return buffered + (n > buffered ? file_.read(dst + buffered, n - buffered) : 0);
    }
    std::size_t got = 0;
    while (got < n && !ended_) {
      if (avail_ == 0) refill();
      if (avail_ == 0)
        MNIST_THROW(DataError,
                    "gzip stream in '{}' ends early: {} compressed bytes read, the stream's end "
                    "marker never came (file truncated or download incomplete?)",
                    file_.path(), consumed_);
      zs_.next_in = in_.data() + pos_;
      zs_.avail_in = static_cast<uInt>(avail_);
      // zlib counts in uInt (32 bits): at most 1 GiB of room per call.
      const std::size_t room = std::min<std::size_t>(n - got, std::size_t{1} << 30);
      zs_.next_out = dst + got;
      zs_.avail_out = static_cast<uInt>(room);
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      const std::size_t used = avail_ - zs_.avail_in;
      pos_ += used;
      avail_ -= used;
      consumed_ += used;
      got += room - zs_.avail_out;
      if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_MEM_ERROR || rc == Z_STREAM_ERROR) {
        const std::string why = zs_.msg != nullptr ? zs_.msg : "error code " + std::to_string(rc);
        MNIST_THROW(DataError, "corrupt gzip data in '{}' near compressed byte offset {}: {}",
                    file_.path(), consumed_, why);
      }
      if (rc == Z_STREAM_END) next_member();
    }
    return got;
  }

 private:
  static constexpr std::size_t kInputChunk = 1 << 16;

  // Keeps the unread bytes, then fills the buffer from the file.
  void refill() {
    std::memmove(in_.data(), in_.data() + pos_, avail_);
    pos_ = 0;
    avail_ += file_.read(in_.data() + avail_, in_.size() - avail_);
  }

  // After a member's end: the file ends, or another member starts.
  void next_member() {
    if (avail_ < 2) refill();
    if (avail_ == 0) {
      ended_ = true;
      return;
    }
    if (avail_ < 2 || in_[pos_] != 0x1f || in_[pos_ + 1] != 0x8b)
      MNIST_THROW(DataError,
                  "'{}' has {} trailing bytes after its gzip stream (at compressed byte offset {})",
                  file_.path(), file_.size() - consumed_, consumed_);
    inflateReset(&zs_);
  }

  InputFile file_;
  std::vector<uint8_t> in_;
  std::size_t pos_ = 0, avail_ = 0;  // unread compressed (or raw) bytes: in_[pos_, pos_ + avail_)
  uint64_t consumed_ = 0;            // compressed bytes inflated so far
  bool gz_ = false, ended_ = false;
  z_stream zs_{};
};

// An IDX file's header, as read_idx_contents hands it to the reader of its kind: up to the header
// size (fewer when the file is shorter).
struct IdxBody {
  uint64_t bytes = 0;          // what the header promises after itself
  std::string header_summary;  // "3 images of 28x28", for messages
};

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

// The tool holds a data file's contents in host memory (and each CPU worker one more copy): a
// header that promises more than the machine has is refused before anything is read.
void check_fits_host_memory(const std::string& path, uint64_t bytes) {
  const uint64_t available = available_host_bytes();
  if (bytes <= available) return;
  MNIST_THROW(DataError,
              "'{}': its header promises {:.0f} MiB of data, which needs {:.0f} MiB of host "
              "memory; {:.0f} MiB are available",
              path, bytes / 1048576.0, bytes / 1048576.0, available / 1048576.0);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

}  // namespace

std::vector<uint8_t> read_file_maybe_gzip(const std::string& path, uint64_t max_bytes) {
  ContentStream in(path);
  std::vector<uint8_t> out;
  // Grown as the contents come, so what is held is what was there (up to the cap plus one byte).
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  while (true) {
    const std::size_t before = out.size();
    out.resize(before + kChunk);
    const std::size_t got = in.read(out.data() + before, kChunk);
    out.resize(before + got);
    if (out.size() > max_bytes)
      MNIST_THROW(DataError, "'{}' {} more than {} bytes, more than this kind of file may hold",
                  path, in.gzip() ? "decompresses to" : "holds", max_bytes);
    if (got < kChunk) return out;
  }
}

std::vector<uint8_t> read_file_prefix(const std::string& path, std::size_t n) {
  ContentStream in(path);
  std::vector<uint8_t> out(n);
  out.resize(in.read(out.data(), n));
  return out;
}

namespace {

// Reads an IDX file's header (into `header`, up to header_bytes: fewer when the file is shorter),
// asks `parse` what the header promises after itself, then reads exactly that into `body` and
// refuses a file with more: one byte past the promise is all it ever reads.
template <class Parse>
void read_idx_contents(const std::string& path, std::size_t header_bytes,
                       std::vector<uint8_t>& header, std::vector<uint8_t>& body, Parse&& parse) {
  ContentStream in(path);
  header.resize(header_bytes);
  header.resize(in.read(header.data(), header_bytes));
  const IdxBody promise = parse(header);
  const uint64_t expected = header_bytes + promise.bytes;
  // A raw file's size is known: compared at once, with both counts in the message.
  if (!in.gzip()) check_exact_size(path, expected, in.file_size(), promise.header_summary, false);
  // Room is reserved (address space, not memory) and filled in chunks: a truncated file only ever
  // makes the tool hold what it really has.
  body.reserve(promise.bytes);
  constexpr uint64_t kChunk = uint64_t{16} << 20;
  while (body.size() < promise.bytes) {
    const std::size_t before = body.size();
    const std::size_t want = static_cast<std::size_t>(std::min(kChunk, promise.bytes - before));
    body.resize(before + want);
    const std::size_t got = in.read(body.data() + before, want);
    body.resize(before + got);
    if (got < want)
      check_exact_size(path, expected, header_bytes + body.size(), promise.header_summary,
                       in.gzip());
  }
  uint8_t extra = 0;
  if (in.read(&extra, 1) != 0)
    MNIST_THROW(DataError,
                "'{}' has trailing bytes: its header ({}) implies {} bytes, but the {} more; "
                "reading stopped one byte past the header's promise",
                path, promise.header_summary, expected,
                in.gzip() ? "decompressed data holds" : "file holds");
}

}  // namespace

IdxImages read_idx_images(const std::string& path) {
  std::vector<uint8_t> header_bytes;
  IdxImages out;
  read_idx_contents(path, kIdxImagesHeaderBytes, header_bytes, out.pixels, [&](const auto& header) {
    if (header.size() < 4) {
      MNIST_THROW(DataError,
                  "'{}' is too short for an IDX images file: {} bytes, not even the 4-byte magic",
                  path, header.size());
    }
    check_magic(path, read_be32(header.data()), kIdxImagesMagic, "images: uint8, 3 dimensions");
    if (header.size() < kIdxImagesHeaderBytes) {
      MNIST_THROW(
          DataError,
          "'{}' is too short for an IDX images file: {} bytes, the header alone is {} bytes", path,
          header.size(), kIdxImagesHeaderBytes);
    }
    const uint32_t count = read_be32(header.data() + 4);
    const uint32_t rows = read_be32(header.data() + 8);
    const uint32_t cols = read_be32(header.data() + 12);
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
                  "'{}': implausible image size {}x{} (rows at byte offset 8, cols at 12); each "
                  "side must be at most {} (is this an IDX images file?)",
                  path, rows, cols, kIdxMaxSide);
    }
    const uint64_t total = uint64_t{count} * rows * cols;
    if (total > kIdxMaxPixels) {
      MNIST_THROW(DataError, "'{}': {} images of {}x{} make {} pixels, more than the {} supported",
                  path, count, rows, cols, total, kIdxMaxPixels);
    }
    check_fits_host_memory(path, total);
    out.count = static_cast<int>(count);
    out.rows = static_cast<int>(rows);
    out.cols = static_cast<int>(cols);
    return IdxBody{total, fmt::format("{} images of {}x{}", count, rows, cols)};
  });
  return out;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  std::vector<uint8_t> header, labels;
  read_idx_contents(path, kIdxLabelsHeaderBytes, header, labels, [&](const auto& bytes) {
    if (bytes.size() < 4) {
      MNIST_THROW(DataError,
                  "'{}' is too short for an IDX labels file: {} bytes, not even the 4-byte magic",
                  path, bytes.size());
    }
    check_magic(path, read_be32(bytes.data()), kIdxLabelsMagic, "labels: uint8, 1 dimension");
    if (bytes.size() < kIdxLabelsHeaderBytes) {
      MNIST_THROW(
          DataError,
          "'{}' is too short for an IDX labels file: {} bytes, the header alone is {} bytes", path,
          bytes.size(), kIdxLabelsHeaderBytes);
    }
    const uint32_t count = read_be32(bytes.data() + 4);
    if (count == 0) {
      MNIST_THROW(DataError,
                  "'{}': label count (header field at byte offset 4) is 0; it must be at least 1",
                  path);
    }
    check_fits_host_memory(path, count);
    return IdxBody{count, fmt::format("{} labels", count)};
  });
  return labels;
}

ImageSet read_idx_pair(const std::string& images_path, const std::string& labels_path,
                       int num_classes) {
  if (num_classes < 1 || num_classes > 256) {
    MNIST_THROW(DataError, "num_classes is {}; IDX uint8 labels allow 1..256", num_classes);
  }
  // The two headers first: counts that disagree are refused before either body is read (an
  // images header may promise up to 2 GiB). Headers that are not IDX are left to the readers
  // below, which say what is wrong with them.
  const std::vector<uint8_t> image_header = read_file_prefix(images_path, kIdxImagesHeaderBytes);
  const std::vector<uint8_t> label_header = read_file_prefix(labels_path, kIdxLabelsHeaderBytes);
  if (image_header.size() == kIdxImagesHeaderBytes &&
      read_be32(image_header.data()) == kIdxImagesMagic &&
      label_header.size() == kIdxLabelsHeaderBytes &&
      read_be32(label_header.data()) == kIdxLabelsMagic &&
      read_be32(image_header.data() + 4) != read_be32(label_header.data() + 4)) {
    MNIST_THROW(DataError,
                "'{}' holds {} images but '{}' holds {} labels (header counts at byte offset 4); "
                "they must match",
                images_path, read_be32(image_header.data() + 4), labels_path,
                read_be32(label_header.data() + 4));
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
  // A few lines written by scripts/fetch_data.sh; 64 KiB is far beyond them.
  std::istringstream in(read_regular_file(file.string(), 64 << 10, "provenance file"));
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

void check_images_fit_model(const ImageSet& set, int c, int h, int w) {
  if (set.rows == h && set.cols == w && c == 1) return;
  MNIST_THROW(DataError,
              "{}: images are 1x{}x{} (channels x rows x cols; these files have one channel) but "
              "model.input is [{}, {}, {}]; they must match",
              set.images_path, set.rows, set.cols, c, h, w);
}

ImageSet split_off_first(ImageSet& set, int n) {
  MNIST_CHECK(n >= 0 && n <= set.count, "cannot hold out {} of {} images", n, set.count);
  const auto pixels = static_cast<std::ptrdiff_t>(n) * set.pixels_per_image();
  ImageSet first;
  first.count = n;
  first.rows = set.rows;
  first.cols = set.cols;
  first.images_path = set.images_path;
  first.labels_path = set.labels_path;
  first.pixels.assign(set.pixels.begin(), set.pixels.begin() + pixels);
  first.labels.assign(set.labels.begin(), set.labels.begin() + n);
  set.pixels.erase(set.pixels.begin(), set.pixels.begin() + pixels);
  set.labels.erase(set.labels.begin(), set.labels.begin() + n);
  set.count -= n;
  return first;
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
  if (cfg.validation_size > 0 && cfg.validation_size >= ds.train.count) {
    MNIST_THROW(DataError,
                "data.validation_size is {} but '{}' holds {} images; it must leave at least one "
                "to train on",
                cfg.validation_size, ds.train.images_path, ds.train.count);
  }
  ds.validation = split_off_first(ds.train, cfg.validation_size);
  ds.provenance = read_provenance(dir);
  return ds;
}

}  // namespace mnist
