// The options that reproduce TensorFlow 1 and improve on the seed: random-shift augmentation
// (data/augment.hpp) from the image up to the trainer, the held-out validation images, and
// TensorFlow's placement of Adam's epsilon.
#include <catch2/catch.hpp>

#include <memory>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "comm/thread_communicator.hpp"
#include "data/augment.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"
#include "support/idx_writer.hpp"
#include "support/synthetic.hpp"
#include "train/device_plan.hpp"
#include "train/trainer.hpp"

using namespace mnist;
using Catch::Matchers::Contains;

namespace {
// Parameters after `steps` steps of the small synthetic network on `workers` CPU workers.
std::vector<float> params_after(int workers, const std::vector<std::string>& overrides) {
  std::vector<std::string> all = overrides;
  all.push_back("devices.cpu_workers=" + std::to_string(workers));
  const Experiment e = parse_experiment(testing::small_network_yaml(), "augment-test.yaml", all);
  const Model model = Model::build(e.model);
  static const Dataset data = testing::synthetic_dataset(480, 100);
  auto comm = std::make_shared<ThreadCommunicator>(workers);
  Trainer trainer(e, model, std::make_shared<const Dataset>(data),
                  plan_devices(e.devices, {}).factory(), workers, comm);
  for (int64_t s = 0; s < e.train.steps; ++s) trainer.step();
  return trainer.params();
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

// A 4x5 image whose pixel (y, x) is 10 * (y + 1) + x + 1, so every pixel is distinct and nonzero.
std::vector<uint8_t> numbered(int rows, int cols) {
  std::vector<uint8_t> img(rows * cols);
  for (int y = 0; y < rows; ++y)
    for (int x = 0; x < cols; ++x) img[y * cols + x] = static_cast<uint8_t>(10 * (y + 1) + x + 1);
  return img;
}
}  // namespace

TEST_CASE("shift_image moves the picture and fills the vacated pixels with 0", "[augment]") {
  const int rows = 4, cols = 5;
  const std::vector<uint8_t> src = numbered(rows, cols);
  std::vector<uint8_t> dst(rows * cols, 99);
  for (int dy = -5; dy <= 5; ++dy)
    for (int dx = -6; dx <= 6; ++dx) {
      INFO("dx " << dx << " dy " << dy);
      shift_image(src.data(), dst.data(), rows, cols, PixelShift{dx, dy});
      for (int y = 0; y < rows; ++y)
        for (int x = 0; x < cols; ++x) {
          const int sy = y - dy, sx = x - dx;
          const bool inside = sy >= 0 && sy < rows && sx >= 0 && sx < cols;
          CHECK(dst[y * cols + x] == (inside ? src[sy * cols + sx] : 0));
        }
    }
  shift_image(src.data(), dst.data(), rows, cols, PixelShift{0, 0});
  CHECK(dst == src);
}

TEST_CASE("random shifts: pure function of (seed, step, sample), every offset in range drawn",
          "[augment]") {
  CHECK(random_shift_for(1, 3, 5, 0).dx == 0);
  CHECK(random_shift_for(1, 3, 5, 0).dy == 0);
  std::map<std::pair<int, int>, int> seen;
  for (int64_t sample = 0; sample < 2000; ++sample) {
    const PixelShift s = random_shift_for(7, 11, sample, 2);
    REQUIRE(s.dx >= -2);
    REQUIRE(s.dx <= 2);
    REQUIRE(s.dy >= -2);
    REQUIRE(s.dy <= 2);
    ++seen[{s.dx, s.dy}];
    const PixelShift again = random_shift_for(7, 11, sample, 2);
    CHECK((again.dx == s.dx && again.dy == s.dy));
  }
  // 25 offsets, 80 expected each: all appear, none far off uniform.
  REQUIRE(seen.size() == 25);
  for (const auto& [offset, count] : seen) CHECK((count > 40 && count < 130));
  // Another step, seed or sample draws differently (not always the same offsets).
  int differ_step = 0, differ_seed = 0;
  for (int64_t sample = 0; sample < 100; ++sample) {
    const PixelShift a = random_shift_for(7, 11, sample, 2);
    const PixelShift b = random_shift_for(7, 12, sample, 2);
    const PixelShift c = random_shift_for(8, 11, sample, 2);
    differ_step += a.dx != b.dx || a.dy != b.dy;
    differ_seed += a.dx != c.dx || a.dy != c.dy;
  }
  CHECK(differ_step > 80);
  CHECK(differ_seed > 80);
}

TEST_CASE("gather_shifted: a slice of the global batch shifts as the whole batch does",
          "[augment]") {
  ImageSet set;
  set.count = 6;
  set.rows = 4;
  set.cols = 5;
  for (int i = 0; i < set.count; ++i) {
    std::vector<uint8_t> img = numbered(4, 5);
    for (auto& p : img) p = static_cast<uint8_t>(p + i);  // images differ
    set.pixels.insert(set.pixels.end(), img.begin(), img.end());
    set.labels.push_back(static_cast<uint8_t>(i % 3));
  }
  const std::vector<int32_t> batch = {4, 0, 5, 5, 2};
  std::vector<uint8_t> whole, whole_labels, part, part_labels;
  gather_shifted(set, batch.data(), 5, 3, 9, 0, 1, whole, whole_labels);
  REQUIRE(whole.size() == 5u * 20);
  CHECK(whole_labels == std::vector<uint8_t>{1, 0, 2, 2, 2});
  for (int i = 0; i < 5; ++i) {
    std::vector<uint8_t> expected(20);
    shift_image(set.pixels.data() + 20 * batch[i], expected.data(), 4, 5,
                random_shift_for(3, 9, i, 1));
    CHECK(std::equal(expected.begin(), expected.end(), whole.begin() + 20 * i));
  }
  // A worker holding positions [2, 5) of the global batch gets exactly those images.
  gather_shifted(set, batch.data() + 2, 3, 3, 9, 2, 1, part, part_labels);
  CHECK(std::equal(part.begin(), part.end(), whole.begin() + 2 * 20));
  CHECK(std::equal(part_labels.begin(), part_labels.end(), whole_labels.begin() + 2));
}

TEST_CASE("split_off_first moves the first images out and keeps both parts in order",
          "[augment][data]") {
  ImageSet set;
  set.count = 4;
  set.rows = 1;
  set.cols = 2;
  set.pixels = {1, 2, 3, 4, 5, 6, 7, 8};
  set.labels = {0, 1, 2, 3};
  set.images_path = "images";
  const ImageSet first = split_off_first(set, 1);
  CHECK(set.count == 3);
  CHECK(set.pixels == std::vector<uint8_t>{3, 4, 5, 6, 7, 8});
  CHECK(set.labels == std::vector<uint8_t>{1, 2, 3});
  CHECK(first.count == 1);
  CHECK(first.rows == 1);
  CHECK(first.cols == 2);
  CHECK(first.pixels == std::vector<uint8_t>{1, 2});
  CHECK(first.labels == std::vector<uint8_t>{0});
  CHECK(first.images_path == "images");
  CHECK(split_off_first(set, 0).count == 0);
  CHECK(set.count == 3);
}

TEST_CASE("random shifts in training: W workers equal one worker, and the shifts act",
          "[augment][engine]") {
  const std::vector<std::string> shifted = {"train.batch_norm=sync", "train.steps=10",
                                            "data.random_shift=2"};
  const std::vector<float> one = params_after(1, shifted);
  // Each worker shifts its slice by the global positions' draws: the same images as one worker.
  CHECK(max_abs_diff(one, params_after(3, shifted)) < 2e-4);
  const std::vector<float> plain = params_after(1, {"train.batch_norm=sync", "train.steps=10"});
  CHECK(max_abs_diff(one, plain) > 1e-3);
}

TEST_CASE("epsilon_style tensorflow is epsilon * sqrt(1 / (1 - beta2^t)) added to sqrt(v_hat)",
          "[augment][engine]") {
  // One step (t = 1) with a large epsilon, so its placement shows: TensorFlow's 1e-3 equals
  // PyTorch's 1e-3 / sqrt(1 - 0.999).
  const std::vector<float> tf = params_after(
      1, {"train.steps=1", "optimizer.epsilon=0.001", "optimizer.epsilon_style=tensorflow"});
  const double equivalent = 0.001 / std::sqrt(1.0 - 0.999);
  const std::vector<float> pytorch =
      params_after(1, {"train.steps=1", "optimizer.epsilon=" + std::to_string(equivalent)});
  const std::vector<float> plain = params_after(1, {"train.steps=1", "optimizer.epsilon=0.001"});
  CHECK(max_abs_diff(tf, pytorch) < 1e-7);
  CHECK(max_abs_diff(tf, plain) > 1e-4);
}

TEST_CASE("data.validation_size: load_dataset trains on the rest, and refuses to hold out all",
          "[augment][data]") {
  test::ScratchDir dir;
  std::vector<uint8_t> pixels(5 * 4);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i);
  test::write_idx_images(dir.file(kTrainImages), 5, 2, 2, pixels);
  test::write_idx_labels(dir.file(kTrainLabels), {0, 1, 2, 3, 4});
  test::write_idx_images(dir.file(kTestImages), 1, 2, 2, {9, 9, 9, 9});
  test::write_idx_labels(dir.file(kTestLabels), {7});
  DataConfig cfg;
  cfg.dataset = "custom";
  cfg.dir = dir.path();
  cfg.validation_size = 2;
  const Dataset ds = load_dataset(cfg, 10);
  CHECK(ds.train.count == 3);
  CHECK(ds.train.labels == std::vector<uint8_t>{2, 3, 4});
  CHECK(ds.train.pixels.front() == 8);  // image 2's first pixel
  CHECK(ds.validation.count == 2);      // the held-out images are the validation split
  CHECK(ds.validation.labels == std::vector<uint8_t>{0, 1});
  CHECK(ds.validation.pixels == std::vector<uint8_t>(pixels.begin(), pixels.begin() + 8));
  CHECK(ds.test.count == 1);  // the test split is untouched
  cfg.validation_size = 5;
  CHECK_THROWS_WITH(load_dataset(cfg, 10), Contains("data.validation_size is 5") &&
                                               Contains(dir.file(kTrainImages)) &&
                                               Contains("holds 5 images"));
}

namespace {
struct LossRecorder : RunObserver {
  std::vector<double> losses;
  void on_step(const StepRecord& r) override { losses.push_back(r.loss); }
};
struct Logged {
  std::vector<double> losses;
  std::vector<float> params, state;
};
Logged logged_run(int workers, const std::vector<std::string>& overrides) {
  std::vector<std::string> all = overrides;
  all.push_back("devices.cpu_workers=" + std::to_string(workers));
  all.push_back("train.log_every=1");
  all.push_back("train.batch_norm=sync");
  const Experiment e = parse_experiment(testing::small_network_yaml(), "display-test.yaml", all);
  const Model model = Model::build(e.model);
  static const Dataset data = testing::synthetic_dataset(480, 100);
  auto comm = std::make_shared<ThreadCommunicator>(workers);
  Trainer trainer(e, model, std::make_shared<const Dataset>(data),
                  plan_devices(e.devices, {}).factory(), workers, comm);
  LossRecorder rec;
  trainer.run(rec);
  return Logged{rec.losses, trainer.params(), trainer.state()};
}
}  // namespace

TEST_CASE(
    "log_after_update: the seed's display logs after the update and moves only the running "
    "statistics",
    "[augment][engine]") {
  const Logged plain = logged_run(1, {"train.steps=6"});
  const Logged after = logged_run(1, {"train.steps=6", "train.log_after_update=true"});
  REQUIRE(after.losses.size() == 6);
  // The weights follow the same gradients (a training pass's gradients do not read the running
  // statistics); only the running statistics got the extra updates.
  CHECK(after.params == plain.params);
  CHECK(max_abs_diff(after.state, plain.state) > 1e-6);
  // Each logged loss is measured after that step's update: lower than before it, on this task.
  for (std::size_t i = 0; i < 6; ++i) {
    INFO("step " << i + 1);
    CHECK(after.losses[i] < plain.losses[i]);
  }
  // Split across workers the display pass sees the global batch, as one worker does.
  const Logged two = logged_run(2, {"train.steps=6", "train.log_after_update=true"});
  for (std::size_t i = 0; i < 6; ++i) CHECK(std::abs(two.losses[i] - after.losses[i]) < 1e-4);
}
