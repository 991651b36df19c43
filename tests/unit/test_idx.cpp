// IDX reader and dataset loader, on files generated here (tests/support/idx_writer) in a temp dir.

#include <catch2/catch.hpp>

#include <array>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/idx.hpp"
#include "support/idx_writer.hpp"

using Catch::Matchers::Contains;
using mnist::DataError;
using mnist::test::Compression;
using mnist::test::ScratchDir;

namespace {

// n images of rows x cols with distinct, position-dependent pixel values.
std::vector<uint8_t> pattern(int n, int rows, int cols) {
  std::vector<uint8_t> p(size_t(n) * rows * cols);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  return p;
}

// Runs f, which must throw DataError, and returns its message (so a test can check several parts).
template <typename F>
std::string data_error_of(F&& f) {
  try {
    f();
  } catch (const DataError& e) {
    return e.what();
  }
  FAIL("expected a DataError");
  return "";
}

}  // namespace

TEST_CASE("IDX round trip: raw and gzip files read back exactly", "[data][idx]") {
  ScratchDir dir;
  const auto pixels = pattern(3, 2, 4);
  const std::vector<uint8_t> labels = {7, 0, 9};
  const auto compression = GENERATE(Compression::none, Compression::gzip);
  mnist::test::write_idx_images(dir.file("img"), 3, 2, 4, pixels, compression);
  mnist::test::write_idx_labels(dir.file("lbl"), labels, compression);

  const mnist::ImageSet set = mnist::read_idx_pair(dir.file("img"), dir.file("lbl"), 10);
  CHECK(set.count == 3);
  CHECK(set.rows == 2);
  CHECK(set.cols == 4);
  CHECK(set.pixels_per_image() == 8);
  CHECK(set.pixels == pixels);
  CHECK(set.labels == labels);
  CHECK(set.images_path == dir.file("img"));
  CHECK(set.labels_path == dir.file("lbl"));
}

TEST_CASE("IDX gzip is detected by magic bytes, and concatenated gzip members are one stream",
          "[data][idx]") {
  ScratchDir dir;
  const auto pixels = pattern(4, 3, 3);
  const auto bytes = mnist::test::idx_images_bytes(4, 3, 3, pixels);
  // Two gzip members, as `cat a.gz b.gz` makes: gunzip yields the concatenation.
  const std::vector<uint8_t> first(bytes.begin(), bytes.begin() + 20);
  const std::vector<uint8_t> second(bytes.begin() + 20, bytes.end());
  auto gz = mnist::test::gzip_bytes(first);
  const auto gz2 = mnist::test::gzip_bytes(second);
  gz.insert(gz.end(), gz2.begin(), gz2.end());
  mnist::test::write_bytes(dir.file("images.idx"), gz);  // no .gz in the name on purpose
  const mnist::IdxImages img = mnist::read_idx_images(dir.file("images.idx"));
  CHECK(img.count == 4);
  CHECK(img.pixels == pixels);
}

TEST_CASE("IDX bad magic names the file and both values in hex", "[data][idx]") {
  ScratchDir dir;
  mnist::test::write_idx_labels(dir.file("lbl"), {1, 2});
  auto bytes = mnist::test::idx_images_bytes(1, 1, 1, {0});
  bytes[2] = 0x0c;  // type 0x0c (int32) instead of 0x08 (uint8)
  mnist::test::write_bytes(dir.file("img"), bytes);

  const std::string msg = data_error_of([&] { mnist::read_idx_images(dir.file("img")); });
  CHECK_THAT(msg, Contains("bad magic") && Contains(dir.file("img")) && Contains("byte offset 0") &&
                      Contains("expected 0x00000803") && Contains("found 0x00000c03"));
  // A labels file given as images says so.
  const std::string swapped = data_error_of([&] { mnist::read_idx_images(dir.file("lbl")); });
  CHECK_THAT(swapped, Contains("found 0x00000801") && Contains("swapped"));
  CHECK_THROWS_WITH(mnist::read_idx_labels(dir.file("img")),
                    Contains("expected 0x00000801") && Contains("found 0x00000c03"));
}

TEST_CASE("IDX truncated file reports expected and found byte counts", "[data][idx]") {
  ScratchDir dir;
  auto bytes = mnist::test::idx_images_bytes(5, 4, 4, pattern(5, 4, 4));  // 16 + 80 bytes
  bytes.resize(bytes.size() - 7);
  const auto compression = GENERATE(Compression::none, Compression::gzip);
  mnist::test::write_bytes(dir.file("img"), bytes, compression);
  const std::string msg = data_error_of([&] { mnist::read_idx_images(dir.file("img")); });
  CHECK_THAT(msg, Contains(dir.file("img")) && Contains("truncated") &&
                      Contains("5 images of 4x4") && Contains("implies 96 bytes") &&
                      Contains("89 bytes") && Contains("7 bytes missing"));

  // Shorter than the header itself.
  mnist::test::write_bytes(dir.file("lbl"), {0, 0, 8, 1, 0});
  CHECK_THROWS_WITH(mnist::read_idx_labels(dir.file("lbl")),
                    Contains("too short") && Contains("5 bytes") && Contains("8 bytes"));
}

TEST_CASE("IDX trailing bytes are an error, with both counts", "[data][idx]") {
  ScratchDir dir;
  auto bytes = mnist::test::idx_labels_bytes({1, 2, 3});
  bytes.insert(bytes.end(), {0xaa, 0xbb});
  mnist::test::write_bytes(dir.file("lbl"), bytes);
  CHECK_THROWS_WITH(mnist::read_idx_labels(dir.file("lbl")),
                    Contains("trailing bytes") && Contains("3 labels") &&
                        Contains("implies 11 bytes") && Contains("13 bytes") &&
                        Contains("2 bytes too many"));
}

TEST_CASE("IDX image count must equal label count", "[data][idx]") {
  ScratchDir dir;
  mnist::test::write_idx_images(dir.file("img"), 3, 2, 2, pattern(3, 2, 2));
  mnist::test::write_idx_labels(dir.file("lbl"), {0, 1});
  CHECK_THROWS_WITH(mnist::read_idx_pair(dir.file("img"), dir.file("lbl"), 10),
                    Contains(dir.file("img") + "' holds 3 images") &&
                        Contains(dir.file("lbl") + "' holds 2 labels"));
}

TEST_CASE("IDX label out of range names the offset and index of the first bad label",
          "[data][idx]") {
  ScratchDir dir;
  mnist::test::write_idx_images(dir.file("img"), 4, 1, 1, {1, 2, 3, 4});
  mnist::test::write_idx_labels(dir.file("lbl"), {3, 9, 10, 200});
  // label index 2 is at byte offset 8 + 2
  CHECK_THROWS_WITH(mnist::read_idx_pair(dir.file("img"), dir.file("lbl"), 10),
                    Contains("label 10 at byte offset 10 (label index 2)") && Contains("0..9") &&
                        Contains(dir.file("lbl")));
  // With more classes the same file is valid up to 200.
  CHECK(mnist::read_idx_pair(dir.file("img"), dir.file("lbl"), 201).labels[3] == 200);
}

TEST_CASE("IDX zero or implausible dimensions are rejected by field", "[data][idx]") {
  ScratchDir dir;
  mnist::test::write_bytes(dir.file("rows0"), mnist::test::idx_images_bytes(2, 0, 5, {}));
  CHECK_THROWS_WITH(mnist::read_idx_images(dir.file("rows0")),
                    Contains("rows (header field at byte offset 8) is 0"));
  mnist::test::write_bytes(dir.file("count0"), mnist::test::idx_images_bytes(0, 28, 28, {}));
  CHECK_THROWS_WITH(mnist::read_idx_images(dir.file("count0")),
                    Contains("image count (header field at byte offset 4) is 0"));
  mnist::test::write_bytes(dir.file("huge"), mnist::test::idx_images_bytes(1, 28, 1u << 20, {}));
  CHECK_THROWS_WITH(mnist::read_idx_images(dir.file("huge")),
                    Contains("implausible image size 28x1048576") && Contains("at most 4096"));
  mnist::test::write_bytes(dir.file("labels0"), mnist::test::idx_labels_bytes({}));
  CHECK_THROWS_WITH(mnist::read_idx_labels(dir.file("labels0")),
                    Contains("label count (header field at byte offset 4) is 0"));
}

TEST_CASE("IDX missing file or a directory is a DataError naming the path", "[data][idx]") {
  ScratchDir dir;
  CHECK_THROWS_WITH(mnist::read_idx_images(dir.file("nope")),
                    Contains("not found") && Contains(dir.file("nope")));
  CHECK_THROWS_AS(mnist::read_idx_labels(dir.path()), DataError);
}

TEST_CASE("IDX corrupt, truncated or padded gzip is a DataError", "[data][idx]") {
  ScratchDir dir;
  const auto gz = mnist::test::gzip_bytes(mnist::test::idx_images_bytes(8, 8, 8, pattern(8, 8, 8)));

  auto bad_method = gz;
  bad_method[2] = 7;  // compression method: only 8 (deflate) exists
  mnist::test::write_bytes(dir.file("method.gz"), bad_method);
  CHECK_THROWS_WITH(mnist::read_idx_images(dir.file("method.gz")),
                    Contains("corrupt gzip data") && Contains(dir.file("method.gz")));

  auto bad_crc = gz;
  bad_crc[bad_crc.size() - 8] ^= 0xff;  // first byte of the CRC-32 in the trailer
  mnist::test::write_bytes(dir.file("crc.gz"), bad_crc);
  CHECK_THROWS_WITH(mnist::read_idx_images(dir.file("crc.gz")),
                    Contains("corrupt gzip data") && Contains("check"));

  const std::vector<uint8_t> cut(gz.begin(), gz.begin() + gz.size() / 2);
  mnist::test::write_bytes(dir.file("cut.gz"), cut);
  CHECK_THROWS_WITH(mnist::read_idx_images(dir.file("cut.gz")),
                    Contains("ends early") && Contains(dir.file("cut.gz")));

  auto padded = gz;
  padded.insert(padded.end(), {'x', 'y', 'z'});
  mnist::test::write_bytes(dir.file("padded.gz"), padded);
  CHECK_THROWS_WITH(mnist::read_idx_images(dir.file("padded.gz")),
                    Contains("3 trailing bytes after its gzip stream"));
}

TEST_CASE("IDX library writer output reads back and leaves no temp file", "[data][idx]") {
  ScratchDir dir;
  const auto pixels = pattern(2, 3, 5);
  mnist::write_idx_images(dir.file("img"), 2, 3, 5, pixels);
  mnist::write_idx_labels(dir.file("lbl"), {4, 2});
  // Byte-exact against the independent test writer.
  CHECK(mnist::read_file_maybe_gzip(dir.file("img"), 1 << 20) ==
        mnist::test::idx_images_bytes(2, 3, 5, pixels));
  CHECK(mnist::read_file_maybe_gzip(dir.file("lbl"), 1 << 20) ==
        mnist::test::idx_labels_bytes({4, 2}));
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++entries;
  }
  CHECK(entries == 2);
}

namespace {

// A dataset dir with train (n_train images) and test (n_test) splits of side x side images.
void write_split_files(const ScratchDir& dir, int n_train, int n_test, int side,
                       Compression train_compression) {
  std::vector<uint8_t> train_labels(n_train), test_labels(n_test);
  for (int i = 0; i < n_train; ++i) train_labels[i] = static_cast<uint8_t>(i % 10);
  for (int i = 0; i < n_test; ++i) test_labels[i] = static_cast<uint8_t>((i + 3) % 10);
  mnist::test::write_idx_images(dir.file(std::string(mnist::kTrainImages) +
                                         (train_compression == Compression::gzip ? ".gz" : "")),
                                n_train, side, side, pattern(n_train, side, side),
                                train_compression);
  mnist::test::write_idx_labels(dir.file(mnist::kTrainLabels), train_labels);
  mnist::test::write_idx_images(dir.file(mnist::kTestImages), n_test, side, side,
                                pattern(n_test, side, side));
  mnist::test::write_idx_labels(dir.file(std::string(mnist::kTestLabels) + ".gz"), test_labels,
                                Compression::gzip);
}

}  // namespace

TEST_CASE("load_dataset resolves standard names, raw or .gz, and reads PROVENANCE", "[data][idx]") {
  ScratchDir dir;
  write_split_files(dir, 12, 5, 4, Compression::gzip);
  {
    std::ofstream prov(dir.file("PROVENANCE"));
    prov << "# written by scripts/fetch_data.sh\nsource: unit test files\nfetched: 2024-01-02\n"
            "train: 12 images\n";
  }
  mnist::DataConfig cfg;
  cfg.dataset = "custom";
  cfg.dir = dir.path();
  const mnist::Dataset ds = mnist::load_dataset(cfg, 10);
  CHECK(ds.name == "custom");
  CHECK(ds.train.count == 12);
  CHECK(ds.test.count == 5);
  CHECK(ds.train.images_path == dir.file(std::string(mnist::kTrainImages) + ".gz"));
  CHECK(ds.test.labels_path == dir.file(std::string(mnist::kTestLabels) + ".gz"));
  CHECK(ds.test.labels[0] == 3);
  CHECK(ds.train.pixels == pattern(12, 4, 4));
  CHECK(ds.provenance == "unit test files (fetched 2024-01-02)");

  // Without PROVENANCE the field stays empty; a PROVENANCE without a source line is an error.
  std::filesystem::remove(dir.file("PROVENANCE"));
  CHECK(mnist::load_dataset(cfg, 10).provenance.empty());
  std::ofstream(dir.file("PROVENANCE")) << "fetched: today\n";
  CHECK_THROWS_WITH(mnist::load_dataset(cfg, 10), Contains("no 'source: ...' line"));
}

TEST_CASE("load_dataset: explicit paths win over the directory", "[data][idx]") {
  ScratchDir dir, other;
  write_split_files(dir, 12, 5, 4, Compression::none);
  mnist::test::write_idx_images(other.file("imgs"), 2, 4, 4, pattern(2, 4, 4));
  mnist::test::write_idx_labels(other.file("lbls"), {1, 1});
  mnist::DataConfig cfg;
  cfg.dataset = "custom";
  cfg.dir = dir.path();
  cfg.test_images = other.file("imgs");
  cfg.test_labels = other.file("lbls");
  const mnist::Dataset ds = mnist::load_dataset(cfg, 10);
  CHECK(ds.train.count == 12);
  CHECK(ds.test.count == 2);
  CHECK(ds.test.images_path == other.file("imgs"));
}

TEST_CASE("load_dataset: missing files are listed with the fetch command", "[data][idx]") {
  ScratchDir dir;
  mnist::test::write_idx_images(dir.file(mnist::kTrainImages), 1, 2, 2, pattern(1, 2, 2));
  mnist::DataConfig cfg;
  cfg.dataset = "mnist";
  cfg.dir = dir.path();
  const std::string msg = data_error_of([&] { mnist::load_dataset(cfg, 10); });
  CHECK_THAT(msg,
             Contains("3 of 4 data files missing") && Contains(dir.file(mnist::kTrainLabels)) &&
                 Contains(dir.file(mnist::kTestImages)) && Contains("t10k-labels-idx1-ubyte.gz") &&
                 Contains("scripts/fetch_data.sh mnist"));
  CHECK_THAT(msg, !Contains(dir.file(mnist::kTrainImages) + "'"));

  // An explicit path that does not exist names its config key and is not guessed as .gz.
  cfg.train_labels = dir.file("typo");
  CHECK_THROWS_WITH(mnist::load_dataset(cfg, 10), Contains("(from data.train_labels)"));

  // Default dir is data/<dataset>, relative to the working directory.
  mnist::DataConfig defaults;
  defaults.dataset = "fashion-mnist-not-here";
  CHECK_THROWS_WITH(mnist::load_dataset(defaults, 10),
                    Contains("data/fashion-mnist-not-here/train-images-idx3-ubyte") &&
                        Contains("put the four IDX files"));
}

TEST_CASE("load_dataset: train and test image sizes must match", "[data][idx]") {
  ScratchDir dir;
  write_split_files(dir, 3, 2, 4, Compression::none);
  mnist::test::write_idx_images(dir.file(mnist::kTestImages), 2, 5, 4, pattern(2, 5, 4));
  mnist::DataConfig cfg;
  cfg.dataset = "custom";
  cfg.dir = dir.path();
  CHECK_THROWS_WITH(mnist::load_dataset(cfg, 10), Contains("are 4x4") && Contains("are 5x4"));
}
