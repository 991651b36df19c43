// Runs with a validation split, on the real binary and the small real subset: the evaluations of
// the split in metrics.jsonl, the best checkpoint against the step checkpoint it copies and an
// `mnist-train eval` of it, early stopping (exit 0), a resume that keeps the best and the count
// towards the patience, and the keys' errors. Each run is 150 steps of 32 images (about 2 s).
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "core/json.hpp"
#include "model/model.hpp"
#include "support/command.hpp"
#include "support/files.hpp"
#include "support/idx_writer.hpp"
#include "train/checkpoint.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

using Result = mnist::test::CommandResult;
using mnist::test::read_text;

// The quick-start network on data/mnist-small with 500 validation images, evaluated every 10
// steps, a checkpoint every 10 steps (all kept), plus `extra`; stderr into the pipe.
Result train(const fs::path& dir, const std::string& extra) {
  mnist::test::require_mnist_small();
  return mnist::test::run_command(
      "cd '" MNIST_SOURCE_DIR "' && '" MNIST_TRAIN_BIN
      "' --config configs/cpu_quickstart.yaml --set data.dataset=mnist-small "
      "--set data.validation_size=500 --set train.steps=150 --set train.batch_per_device=32 "
      "--set train.log_every=50 --set train.eval_every=10 --set devices.threads=1 "
      "--set checkpoint.every=10 --set checkpoint.keep=20 --set output.dir='" +
      dir.string() + "' " + extra + " 2>&1");
}

const mnist::json::Value& member(const mnist::json::Value& v, const char* key) {
  const mnist::json::Value* m = v.find(key);
  INFO("key " << key);
  REQUIRE(m != nullptr);
  return *m;
}
double number(const mnist::json::Value& v, const char* key) {
  const mnist::json::Value& m = member(v, key);
  REQUIRE(m.type == mnist::json::Type::number);
  return std::stod(m.text);
}

mnist::json::Value summary_of(const fs::path& dir) {
  return mnist::json::parse(read_text(dir / "summary.json"), "summary.json");
}

std::vector<mnist::json::Value> eval_records(const fs::path& dir) {
  std::vector<mnist::json::Value> out;
  std::istringstream lines(read_text(dir / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    mnist::json::Value v = mnist::json::parse(line, "metrics.jsonl");
    if (member(v, "type").text == "eval") out.push_back(std::move(v));
  }
  return out;
}

fs::path step_file(const fs::path& dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "step-%06lld.safetensors", static_cast<long long>(step));
  return dir / "checkpoints" / name;
}

mnist::CheckpointState load(const fs::path& dir, const fs::path& file) {
  const mnist::Model model =
      mnist::Model::build(mnist::load_experiment((dir / "config.yaml").string()).model);
  return mnist::load_checkpoint(file.string(), model);
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("a run with a validation split evaluates it and keeps the best checkpoint by it",
          "[validation]") {
  const mnist::test::ScratchDir scratch;
  const fs::path dir = fs::path(scratch.path()) / "run";
  const Result run = train(dir, "");
  INFO(run.output);
  REQUIRE(run.code == 0);

  // Every eval_every step and the last one on the validation split; the test set only at the end,
  // on the final parameters and on the best checkpoint.
  std::map<int64_t, double> validation;
  int64_t best_step = -1;
  double best_accuracy = -1;
  std::vector<std::string> tests;
  for (const mnist::json::Value& r : eval_records(dir)) {
    const auto step = static_cast<int64_t>(number(r, "step"));
    if (member(r, "split").text == "validation") {
      CHECK(validation.count(step) == 0);
      validation[step] = number(r, "accuracy");
      CHECK(number(r, "samples") == 500);
      if (validation[step] > best_accuracy) {  // ties keep the earlier step
        best_accuracy = validation[step];
        best_step = step;
      }
      continue;
    }
    CHECK(member(r, "split").text == "test");
    CHECK(number(r, "samples") == 1505);
    const mnist::json::Value* of = r.find("checkpoint");
    tests.push_back(of ? of->text + "@" + std::to_string(step) : "final@" + std::to_string(step));
  }
  REQUIRE(validation.size() == 15);
  for (int64_t step = 10; step <= 150; step += 10) CHECK(validation.count(step) == 1);
  CHECK(tests == std::vector<std::string>{"final@150", "best@" + std::to_string(best_step)});

  const mnist::json::Value s = summary_of(dir);
  CHECK(number(s, "best_step") == best_step);
  CHECK(number(s, "best_validation_accuracy") == Approx(best_accuracy).epsilon(1e-7));
  CHECK(number(s, "validation_accuracy") == Approx(validation[150]).epsilon(1e-7));
  CHECK(number(s, "validation_samples") == 500);
  CHECK(member(s, "keep_best").text == "validation_accuracy");
  CHECK_FALSE(member(s, "stopped_early").boolean);
  CHECK_THAT(run.output, Contains("7995 train / 500 validation"));

  // best.safetensors is the checkpoint of the best step, parameters and statistics bit for bit.
  const fs::path best = dir / "checkpoints" / "best.safetensors";
  const mnist::CheckpointState b = load(dir, best);
  const mnist::CheckpointState at = load(dir, step_file(dir, best_step));
  CHECK(b.step == best_step);
  CHECK(bit_equal(b.params, at.params));
  CHECK(bit_equal(b.state, at.state));
  CHECK(b.selection.best_step == best_step);

  // Its test figures in the summary are those `mnist-train eval` finds for it.
  const Result eval = mnist::test::run_command("cd '" MNIST_SOURCE_DIR "' && '" MNIST_TRAIN_BIN
                                               "' eval --checkpoint '" +
                                               best.string() + "' --json 2>/dev/null");
  INFO(eval.output);
  REQUIRE(eval.code == 0);
  const mnist::json::Value report = member(mnist::json::parse(eval.output, "eval"), "report");
  CHECK(number(s, "best_test_accuracy") == Approx(number(report, "accuracy")).margin(1e-6));
  CHECK(number(s, "best_test_loss") == Approx(number(report, "loss")).epsilon(1e-5));
}

TEST_CASE("early stopping exits 0 after patience evaluations and a resume keeps the best and count",
          "[validation]") {
  const mnist::test::ScratchDir scratch;
  const fs::path straight = fs::path(scratch.path()) / "straight";
  const Result run = train(straight, "--set train.patience=3");
  INFO(run.output);
  REQUIRE(run.code == 0);
  const mnist::json::Value s = summary_of(straight);
  const auto steps = static_cast<int64_t>(number(s, "steps"));
  const auto best_step = static_cast<int64_t>(number(s, "best_step"));
  CHECK(member(s, "stopped_early").boolean);
  CHECK(steps == best_step + 3 * 10);  // three evaluations, 10 steps apart, without improvement
  CHECK(steps < 150);
  CHECK_THAT(run.output, Contains("early stop at step " + std::to_string(steps) + " of 150"));
  CHECK(fs::exists(step_file(straight, steps)));  // the final checkpoint, as at the last step
  CHECK(number(s, "test_samples") == 1505);

  // The same run in two processes: 20 steps (which end normally), then --resume auto to 150.
  // Without the best so far and the count, the second would judge afresh and stop elsewhere.
  REQUIRE(steps > 20);
  const fs::path resumed = fs::path(scratch.path()) / "resumed";
  const Result first = train(resumed, "--set train.patience=3 --set train.steps=20");
  INFO(first.output);
  REQUIRE(first.code == 0);
  CHECK_FALSE(member(summary_of(resumed), "stopped_early").boolean);
  const Result second = train(resumed, "--set train.patience=3 --resume auto");
  INFO(second.output);
  REQUIRE(second.code == 0);
  const mnist::json::Value r = summary_of(resumed);
  CHECK(number(r, "first_step") == 20);
  CHECK(number(r, "steps") == steps);
  CHECK(number(r, "best_step") == best_step);
  CHECK(number(r, "best_validation_accuracy") == number(s, "best_validation_accuracy"));
  CHECK(number(r, "best_test_accuracy") == number(s, "best_test_accuracy"));
  CHECK(member(r, "stopped_early").boolean);
  CHECK(bit_equal(load(resumed, resumed / "checkpoints" / "best.safetensors").params,
                  load(straight, straight / "checkpoints" / "best.safetensors").params));
}

TEST_CASE("validation keys without a validation split are exit 2 naming the key and rule",
          "[validation]") {
  const Result keep = mnist::test::run_command(
      "cd '" MNIST_SOURCE_DIR "' && '" MNIST_TRAIN_BIN
      "' --config configs/cpu_quickstart.yaml --set train.keep_best=validation_loss --dry-run "
      "2>&1");
  INFO(keep.output);
  CHECK(keep.code == 2);
  CHECK_THAT(keep.output, Contains("configs/cpu_quickstart.yaml") && Contains("train.keep_best") &&
                              Contains("data.validation_size > 0"));
  const Result patience = mnist::test::run_command(
      "cd '" MNIST_SOURCE_DIR "' && '" MNIST_TRAIN_BIN
      "' --config configs/cpu_quickstart.yaml --set data.validation_size=100 "
      "--set train.patience=2 --dry-run 2>&1");
  INFO(patience.output);
  CHECK(patience.code == 2);
  CHECK_THAT(patience.output, Contains("train.patience") && Contains("train.eval_every > 0"));
}
