// What a user checks or scripts against: the dry run's batch line, plural and singular, options
// after a subcommand, a resumed run's summary, hints for other tools' key names, JSON from eval
// and predict, the MPI in --version.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.hpp"
#include "support/command.hpp"
#include "support/files.hpp"
#include "support/idx_writer.hpp"

namespace fs = std::filesystem;

namespace {

using Result = mnist::test::CommandResult;
using mnist::test::read_text;

// The binary with `args` (shell-quoted) from the source directory; `stderr_too` merges stderr.
Result run_cli(const std::string& args, bool stderr_too = true) {
  const std::string command = "cd '" MNIST_SOURCE_DIR "' && timeout -k 5 120 '" MNIST_TRAIN_BIN
                              "' " +
                              args + (stderr_too ? " 2>&1" : " 2>/dev/null");
  return mnist::test::run_command(command);
}

bool has(const Result& r, const std::string& part) {
  return r.output.find(part) != std::string::npos;
}

void require_data() {
  const fs::path images = fs::path(MNIST_SOURCE_DIR) / "data/mnist-small/train-images-idx3-ubyte";
  if (!fs::exists(images) && !fs::exists(images.string() + ".gz"))
    FAIL("these tests train on data/mnist-small: run scripts/fetch_data.sh mnist-small first");
}

// A short run on the small real subset into `dir`.
std::string train_args(const std::string& dir, int steps) {
  return "--config configs/cpu_quickstart.yaml --set data.dataset=mnist-small "
         "--set train.batch_per_device=16 --set train.log_every=1 --set devices.threads=1 "
         "--set train.steps=" +
         std::to_string(steps) + " --set 'output.dir=" + dir + "'";
}

}  // namespace

TEST_CASE("the dry run prints the steps, global batch and per-replica batch", "[cli][usability]") {
  // Two CPU workers splitting 101 samples: 51 and 50.
  Result r = run_cli(
      "--config configs/two_gpu.yaml --set devices.backend=cpu --set devices.cpu_workers=2 "
      "--set train.global_batch=101 --dry-run");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r, "batch: 1000 steps, global batch 101 (2 replicas, 50-51 per replica)\n"));
  // The seed's meaning: batch_per_device per replica, one step singular.
  r = run_cli(
      "--config configs/two_gpu.yaml --set devices.backend=cpu --set devices.cpu_workers=2 "
      "--set train.steps=1 --dry-run");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r, "batch: 1 step, global batch 2000 (2 replicas, 1000 per replica)\n"));
  r = run_cli(
      "--config configs/cpu_quickstart.yaml --unset train.steps --set train.epochs=2 --dry-run");
  INFO(r.output);
  CHECK(has(r, "batch: 2 epochs (steps from the data's size), global batch"));
}

TEST_CASE("a one-step run says '1 step' in its start line", "[cli][usability]") {
  require_data();
  mnist::test::ScratchDir tmp;
  const Result r = run_cli(train_args(tmp.file("run"), 1));
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r, "; 1 step, global batch 16"));
  CHECK(has(r, "done: 1 step of 16 in"));
  CHECK(!has(r, "1 steps"));
}

TEST_CASE("options of the tool may follow a subcommand", "[cli][usability]") {
  const Result before = run_cli(
      "--config configs/cpu_quickstart.yaml --set devices.threads=1 bench --steps 1 "
      "--warmup 0 --batch 4 --json");
  INFO(before.output);
  CHECK(before.code == 0);
  const Result after = run_cli(
      "bench --config configs/cpu_quickstart.yaml --steps 1 --warmup 0 --batch 4 --json "
      "--set devices.threads=1");
  INFO(after.output);
  CHECK(after.code == 0);
  CHECK(has(after, "\"samples_per_second\""));
  // An option nobody knows is still refused, by its name.
  const Result unknown = run_cli("bench --config configs/cpu_quickstart.yaml --no-such-option");
  CHECK(unknown.code == 2);
  CHECK(has(unknown, "--no-such-option"));
}

TEST_CASE("a resumed run's summary times the steps it ran and says it resumed",
          "[cli][usability]") {
  require_data();
  mnist::test::ScratchDir tmp;
  const std::string dir = tmp.file("run");
  REQUIRE(run_cli(train_args(dir, 4)).code == 0);
  const Result r = run_cli(train_args(dir, 6) + " --resume auto");
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(has(r, "done: step 6 (resumed at 4: 2 steps of 16 run here) in "));
  const mnist::json::Value summary =
      mnist::json::parse(read_text(fs::path(dir) / "summary.json"), "summary.json");
  uint64_t steps = 0, first = 0;
  REQUIRE(summary.find("steps"));
  REQUIRE(summary.find("first_step"));
  CHECK(summary.find("steps")->as_uint64(steps));
  CHECK(summary.find("first_step")->as_uint64(first));
  CHECK(steps == 6);
  CHECK(first == 4);
}

TEST_CASE("another tool's name for a key gets our name as a hint", "[cli][usability]") {
  Result r =
      run_cli("--config configs/cpu_quickstart.yaml --set optimizer.learning_rate=0.1 --dry-run");
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(has(r, "optimizer.learning_rate"));
  CHECK(has(r, "did you mean 'lr'?"));
  r = run_cli("--config configs/cpu_quickstart.yaml --set train.batch_size=8 --dry-run");
  CHECK(r.code == 2);
  CHECK(has(r, "did you mean 'batch_per_device'?"));
}

TEST_CASE("eval --json and predict --json print JSON a script can read", "[cli][usability]") {
  require_data();
  mnist::test::ScratchDir tmp;
  const std::string dir = tmp.file("run");
  REQUIRE(run_cli(train_args(dir, 2)).code == 0);
  const std::string ckpt = dir + "/checkpoints/step-000002.safetensors";
  REQUIRE(fs::exists(ckpt));

  const Result eval = run_cli("eval --json --checkpoint '" + ckpt + "'", false);
  INFO(eval.output);
  REQUIRE(eval.code == 0);
  const mnist::json::Value e = mnist::json::parse(eval.output, "eval --json");
  REQUIRE(e.find("report"));
  const mnist::json::Value& report = *e.find("report");
  uint64_t samples = 0, step = 0;
  REQUIRE(report.find("samples"));
  CHECK(report.find("samples")->as_uint64(samples));
  CHECK(samples == 1505);  // mnist-small's test split
  CHECK(e.find("step")->as_uint64(step));
  CHECK(step == 2);
  REQUIRE(report.find("confusion"));
  CHECK(report.find("confusion")->items.size() == 10);
  CHECK(report.find("class_accuracy")->items.size() == 10);

  mnist::test::write_idx_images(tmp.file("three"), 3, 28, 28, std::vector<uint8_t>(3 * 28 * 28, 9));
  const Result predict =
      run_cli("predict --json --checkpoint '" + ckpt + "' " + tmp.file("three"), false);
  INFO(predict.output);
  REQUIRE(predict.code == 0);
  std::istringstream lines(predict.output);
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    const mnist::json::Value p = mnist::json::parse(line, "predict --json");
    uint64_t index = 0, cls = 10;
    CHECK(p.find("file")->text == tmp.file("three"));
    CHECK(p.find("index")->as_uint64(index));
    CHECK(index == static_cast<uint64_t>(count));
    CHECK(p.find("class")->as_uint64(cls));
    CHECK(cls < 10);
    CHECK(p.find("probabilities")->items.size() == 10);
  }
  CHECK(count == 3);
}

TEST_CASE("the version flag names the MPI implementation, not only the standard",
          "[cli][usability]") {
  const Result r = run_cli("--version");
  INFO(r.output);
  REQUIRE(r.code == 0);
  if (has(r, "MPI:      no")) return;  // a build without MPI says so, as the version test checks
  CHECK(has(r, "MPI:      yes (standard "));
  CHECK(has(r, "; built with "));
  CHECK(has(r, "; library "));
}

TEST_CASE("bench --json names each record's engine, and the default is the config's engine",
          "[cli][usability]") {
  const std::string bench =
      "bench --config configs/cpu_quickstart.yaml --set devices.threads=1 --steps 1 --warmup 0 "
      "--batch 4 --json";
  Result r = run_cli(bench, false);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.rfind("{\"engine\":\"native\",", 0) == 0);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);  // one engine: the config's
  r = run_cli(bench + " --engines all", false);
  INFO(r.output);
  REQUIRE(r.code == 0);
  std::istringstream lines(r.output);
  int records = 0;
  for (std::string line; std::getline(lines, line); ++records) {
    const mnist::json::Value v = mnist::json::parse(line, "bench --json");
    REQUIRE(v.find("engine"));
    CHECK(!v.find("engine")->text.empty());
  }
  CHECK(records >= 1);
}
