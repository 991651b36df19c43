// Hostile and careless inputs meet a bound before they meet an allocation, an overflow or a
// blocking open: every size key swept to its extremes, derived counts beyond what a run
// represents, gzip bombs, oversized or special config and data files, outputs that are FIFOs,
// models that do not match their data, and the host-memory estimate of a run.

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "config/experiment.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "data/dataset.hpp"
#include "data/idx.hpp"
#include "model/model.hpp"
#include "support/idx_writer.hpp"
#include "support/synthetic.hpp"
#include "train/evaluation.hpp"
#include "train/run_log.hpp"
#include "train/run_memory.hpp"
#include "train/worker.hpp"

using Catch::Matchers::Contains;
using mnist::ConfigError;
using mnist::DataError;
using mnist::test::ScratchDir;

namespace {

// A small network with one layer of each kind that has integer keys.
const char* kNetwork = R"(
name: bounds
data: {dataset: custom, dir: unused}
model:
  input: [1, 28, 28]
  layers:
    - conv2d: {filters: 4, kernel: 3, stride: 1, padding: 1}
    - max_pool: {size: 2, stride: 2}
    - flatten: {}
    - dense: {units: 10}
devices: {backend: cpu}
train: {steps: 5, batch_per_device: 32}
)";

// What a run does with a config before touching data or a device: parse, build the model, size a
// replica's batch. Returns "" when all of it passes, else the ConfigError's message; any other
// exception fails the test.
std::string plan_error(const std::vector<std::string>& overrides) {
  try {
    const mnist::Experiment e = mnist::parse_experiment(kNetwork, "bounds.yaml", overrides);
    const mnist::Model model = mnist::Model::build(e.model);
    mnist::replica_memory(model, e.train.batch_per_device, "train.batch_per_device");
    (void)model.summary();
    return "";
  } catch (const ConfigError& err) {
    return err.what();
  }
}

// The extremes an integer key meets: signs, zero, the size-key cap and one past it, the int32
// and int64 limits and one past each, a 20-digit number, and a float.
const std::vector<std::string> kExtremes = {"-9223372036854775808",
                                            "-2147483648",
                                            "-1",
                                            "0",
                                            "1",
                                            "2",
                                            "1048576",
                                            "1048577",
                                            "2147483647",
                                            "2147483648",
                                            "4294967296",
                                            "9223372036854775807",
                                            "9223372036854775808",
                                            "99999999999999999999",
                                            "1e19",
                                            "3.5"};

}  // namespace

TEST_CASE(
    "every integer key of every layer kind, swept to its extremes, passes or is refused by "
    "name, never overflows",
    "[bounds][config][model]") {
  // Each layer kind's integer keys (layer_kinds.cpp), the model's own, and the batch.
  const std::vector<std::string> keys = {"model.layers[0].conv2d.filters",
                                         "model.layers[0].conv2d.kernel",
                                         "model.layers[0].conv2d.stride",
                                         "model.layers[0].conv2d.padding",
                                         "model.layers[1].max_pool.size",
                                         "model.layers[1].max_pool.stride",
                                         "model.layers[3].dense.units",
                                         "model.input[0]",
                                         "model.input[1]",
                                         "model.input[2]",
                                         "model.classes",
                                         "train.batch_per_device"};
  for (const std::string& key : keys) {
    for (const std::string& value : kExtremes) {
      const std::string message = plan_error({key + "=" + value});
      INFO(key << "=" << value << ": " << message);
      // Negative, fractional, beyond a 32-bit int, or (for a size key) past the size-key cap:
      // refused.
      const bool huge = value.size() >= 10 || (value == "1048577" && key.rfind("model.", 0) == 0);
      if (huge || value[0] == '-' || value == "3.5") {
        CHECK_FALSE(message.empty());
      }
      if (message.empty()) continue;
      // Named by its config path: the key itself for a value the reader refused, else the layer
      // whose shape no longer fits (this one or a later one: a stride shrinks what follows).
      CHECK_THAT(message, Contains(key) || Contains("model.layers[") || Contains("model.input"));
    }
  }
  // The examples the tool once crashed on: refused by the key, with the limit.
  CHECK_THAT(plan_error({"model.layers[0].conv2d.padding=2147483647"}),
             Contains("model.layers[0].conv2d.padding") && Contains("1048576"));
  // Within the cap, but an output too tall for any tensor: the layer, the rule and the keys.
  CHECK_THAT(plan_error({"model.layers[0].conv2d.padding=1048576"}),
             Contains("model.layers[0]") && Contains("output height") &&
                 Contains("model.layers[0].conv2d.padding"));
  CHECK_THAT(
      plan_error({"model.layers[0].conv2d.filters=1048576", "model.layers[0].conv2d.kernel=1048576",
                  "model.layers[0].conv2d.padding=same"}),
      Contains("weight tensor") && Contains("kernel"));
  CHECK_THAT(
      plan_error({"model.layers[3].dense.units=1048576", "model.layers[0].conv2d.filters=4096"}),
      Contains("model.layers[3]") && Contains("weight tensor"));
  // A per-sample shape that fits, in a batch that does not: the batch key and the largest batch.
  CHECK_THAT(
      plan_error({"model.layers[0].conv2d.padding=2000", "train.batch_per_device=100"}),
      Contains("train.batch_per_device") && Contains("2147483647") && Contains("at most 33"));
}

TEST_CASE("derived counts beyond what a run represents are refused by key", "[bounds][train]") {
  mnist::TrainConfig t;
  t.batch_per_device = 100;
  for (const double epochs : {1e308, 1e19, 1e12}) {
    t.epochs = epochs;
    INFO("epochs " << epochs);
    CHECK_THROWS_WITH(mnist::plan_batches(t, 1, 60000),
                      Contains("train.epochs") && Contains("steps") && Contains("2147483648"));
  }
  t.epochs = 1;
  CHECK(mnist::plan_batches(t, 1, 60000).steps == 600);
  t.epochs = 1e-9;  // a sliver of an epoch is still one step, never zero
  CHECK(mnist::plan_batches(t, 1, 60000).steps == 1);
  t.epochs = 0;
  t.steps = int64_t{1} << 40;
  CHECK_THROWS_WITH(mnist::plan_batches(t, 1, 60000), Contains("train.steps"));
  // batch_per_device times the replicas must fit the global batch's int.
  t.steps = 10;
  t.batch_per_device = std::numeric_limits<int>::max();
  CHECK_THROWS_WITH(mnist::plan_batches(t, 2, 60000),
                    Contains("train.batch_per_device") && Contains("4294967294"));
}

TEST_CASE("the host-memory estimate names the key that makes a run large", "[bounds][train]") {
  const mnist::Experiment e = mnist::parse_experiment(kNetwork, "bounds.yaml");
  const mnist::Model model = mnist::Model::build(e.model);
  const auto terms = mnist::replica_memory(model, 100000, "train.batch_per_device");
  REQUIRE(terms.size() == 2);
  CHECK(terms[0].key == "train.batch_per_device");
  CHECK(terms[1].key == "model.layers[3].dense");  // the largest parameter tensor's layer
  // Input, two widest gradient buffers and the logits' gradient, per sample, in floats.
  CHECK(terms[0].bytes == uint64_t{100000} * (784 + 2 * 4 * 28 * 28 + 10) * 4);
  CHECK_NOTHROW(mnist::check_host_memory(terms, 1, uint64_t{1} << 40, "training"));
  try {
    mnist::check_host_memory(terms, 4, uint64_t{1} << 30, "training");
    FAIL("expected a ConfigError");
  } catch (const ConfigError& err) {
    const std::string m = err.what();
    CHECK_THAT(m, Contains("train.batch_per_device: training needs at least") &&
                      Contains("MiB of host memory; 1024 MiB are available") &&
                      Contains("over 4 replicas"));
  }
}

TEST_CASE("a gzip bomb is refused after one byte past the header's promise", "[bounds][idx]") {
  ScratchDir dir;
  // 3 labels promised, 32 MiB of zeros after them.
  std::vector<uint8_t> bytes = mnist::test::idx_labels_bytes({1, 2, 3});
  bytes.resize(bytes.size() + (32u << 20), 0);
  std::vector<uint8_t> gz = mnist::test::gzip_bytes(bytes);
  // Damage the trailer's CRC: a reader that inflated everything would report the check failing;
  // one that stops after the promise plus a byte never gets there.
  gz[gz.size() - 8] ^= 0xff;
  mnist::test::write_bytes(dir.file("bomb.gz"), gz);
  CHECK_THROWS_WITH(mnist::read_idx_labels(dir.file("bomb.gz")),
                    Contains(dir.file("bomb.gz")) && Contains("trailing bytes") &&
                        Contains("3 labels") && Contains("implies 11 bytes") &&
                        Contains("one byte past"));
  // The same cap for whole-file reads: a stated limit, the file, and where reading stopped.
  CHECK_THROWS_WITH(mnist::read_file_maybe_gzip(dir.file("bomb.gz"), 1 << 20),
                    Contains(dir.file("bomb.gz")) && Contains("more than 1048576 bytes"));
}

TEST_CASE("image and label counts are compared from the headers, before a body is read",
          "[bounds][idx]") {
  ScratchDir dir;
  // The images header promises 2,739,137 images of 28x28 (2 GiB) and none follow: the counts
  // disagree with the labels', which is said without reading (or waiting for) the 2 GiB.
  mnist::test::write_bytes(dir.file("img"), mnist::test::idx_images_bytes(2739137, 28, 28, {}),
                           mnist::test::Compression::gzip);
  mnist::test::write_idx_labels(dir.file("lbl"), {1, 2});
  CHECK_THROWS_WITH(
      mnist::read_idx_pair(dir.file("img"), dir.file("lbl"), 10),
      Contains("holds 2739137 images") && Contains("holds 2 labels") && Contains("header counts"));
}

TEST_CASE("special files are refused by name without blocking: config, data, PROVENANCE",
          "[bounds][config][idx]") {
  ScratchDir dir;
  const std::string fifo = dir.file("fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Opening a FIFO for reading would wait for a writer forever; these return at once.
  CHECK_THROWS_AS(mnist::load_experiment(fifo), ConfigError);
  CHECK_THROWS_WITH(mnist::load_experiment(fifo),
                    Contains(fifo) && Contains("FIFO") && Contains("config file"));
  CHECK_THROWS_WITH(mnist::load_experiment("/dev/zero"),
                    Contains("/dev/zero") && Contains("character device"));
  CHECK_THROWS_WITH(mnist::read_idx_images(fifo), Contains(fifo) && Contains("FIFO"));
  CHECK_THROWS_WITH(mnist::read_idx_labels(dir.path()), Contains("directory"));

  // A config larger than the stated cap is refused before it is parsed.
  const std::string big = dir.file("big.yaml");
  std::ofstream(big) << "# " << std::string(mnist::kMaxConfigBytes, 'x') << "\n";
  CHECK_THROWS_WITH(mnist::load_experiment(big),
                    Contains(big) && Contains("at most 1048576 bytes"));

  // A FIFO as PROVENANCE beside valid data files.
  const std::string data = dir.file("data");
  std::filesystem::create_directories(data);
  mnist::test::write_idx_images(data + "/train-images-idx3-ubyte", 2, 28, 28,
                                std::vector<uint8_t>(2 * 784, 7));
  mnist::test::write_idx_labels(data + "/train-labels-idx1-ubyte", {0, 1});
  mnist::test::write_idx_images(data + "/t10k-images-idx3-ubyte", 1, 28, 28,
                                std::vector<uint8_t>(784, 7));
  mnist::test::write_idx_labels(data + "/t10k-labels-idx1-ubyte", {1});
  REQUIRE(::mkfifo((data + "/PROVENANCE").c_str(), 0600) == 0);
  mnist::DataConfig cfg;
  cfg.dataset = "custom";
  cfg.dir = data;
  CHECK_THROWS_WITH(mnist::load_dataset(cfg, 10), Contains("PROVENANCE") && Contains("FIFO"));
}

TEST_CASE("outputs never block: a FIFO as metrics.jsonl is refused, one as summary.json replaced",
          "[bounds][train]") {
  ScratchDir dir;
  mnist::Experiment e = mnist::parse_experiment(kNetwork, "bounds.yaml");
  e.output.dir = dir.file("run");
  std::filesystem::create_directories(e.output.dir);
  auto log = std::make_shared<spdlog::logger>("bounds-test");
  const std::string metrics = e.output.dir + "/metrics.jsonl";
  REQUIRE(::mkfifo(metrics.c_str(), 0600) == 0);
  CHECK_THROWS_AS(mnist::RunLog(e, log, true), ConfigError);
  CHECK_THROWS_WITH(mnist::RunLog(e, log, true), Contains(metrics) && Contains("FIFO"));
  std::filesystem::remove(metrics);

  const std::string summary = e.output.dir + "/summary.json";
  REQUIRE(::mkfifo(summary.c_str(), 0600) == 0);
  mnist::RunLog run_log(e, log, true);
  run_log.finish(mnist::TrainSummary{}, "cpu", "synthetic");
  CHECK(std::filesystem::is_regular_file(summary));
  std::ifstream in(summary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Contains("\"name\":\"bounds\""));
}

TEST_CASE("model.input must match the images: channels as well as height and width",
          "[bounds][data]") {
  mnist::ImageSet set;
  set.count = 1;
  set.rows = set.cols = 28;
  set.images_path = "train-images-idx3-ubyte";
  CHECK_NOTHROW(mnist::check_images_fit_model(set, 1, 28, 28));
  CHECK_THROWS_WITH(mnist::check_images_fit_model(set, 3, 28, 28),
                    Contains("train-images-idx3-ubyte") && Contains("1x28x28") &&
                        Contains("model.input is [3, 28, 28]"));
  CHECK_THROWS_AS(mnist::check_images_fit_model(set, 1, 28, 27), DataError);
}

TEST_CASE("evaluation sizes its batch against the tensor limit before allocating a replica",
          "[bounds][evaluation]") {
  // 1024 filters of a 228x228 output (padding 100): 53 million values per sample, so 64 images
  // in one batch would index past 2^31.
  const mnist::Experiment e = mnist::parse_experiment(
      kNetwork, "bounds.yaml",
      {"model.layers[0].conv2d.filters=1024", "model.layers[0].conv2d.padding=100"});
  const mnist::Model model = mnist::Model::build(e.model);
  mnist::ImageSet images;
  images.count = 64;
  images.rows = images.cols = 28;
  images.pixels.assign(64 * 784, 0);
  images.labels.assign(64, 0);
  images.images_path = "t10k-images-idx3-ubyte";
  mnist::CheckpointState weights;
  weights.params = model.initial_params(1);
  weights.state = model.initial_state();
  CHECK_THROWS_WITH(
      mnist::predict_probabilities(e, model, mnist::make_cpu_backend(mnist::BackendOptions{}),
                                   weights, images, 64),
      Contains("train.eval_batch") && Contains("the kernels index") && Contains("model.layers[0]"));
}
