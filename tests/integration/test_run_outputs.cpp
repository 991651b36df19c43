// What a run shows and leaves for people and their tools: the live status line (only where asked
// or on a terminal), TensorBoard event files read back by protobuf, and the plot of the run.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "core/json.hpp"
#include "support/command.hpp"
#include "support/idx_writer.hpp"
#include "support/python.hpp"

namespace fs = std::filesystem;

namespace {

using Result = mnist::test::CommandResult;

Result shell(const std::string& command) {
  return mnist::test::run_command(command);
}

// 20 steps of 32 images of the quick-start config on the small real subset, logged every 5,
// stderr into the pipe.
Result train(const fs::path& dir, const std::string& extra) {
  const fs::path images = fs::path(MNIST_SOURCE_DIR) / "data/mnist-small/train-images-idx3-ubyte";
  if (!fs::exists(images) && !fs::exists(images.string() + ".gz"))
    FAIL("these tests train on data/mnist-small: run scripts/fetch_data.sh mnist-small first");
  return shell("cd '" MNIST_SOURCE_DIR "' && '" MNIST_TRAIN_BIN
               "' --config configs/cpu_quickstart.yaml --set train.steps=20 "
               "--set train.batch_per_device=32 --set train.log_every=5 --set train.eval_every=10 "
               "--set data.dataset=mnist-small --set devices.threads=1 "
               "--set output.dir='" +
               dir.string() + "' " + extra + " 2>&1");
}

const mnist::json::Value& member(const mnist::json::Value& v, const char* key) {
  const mnist::json::Value* m = v.find(key);
  INFO("key " << key);
  REQUIRE(m != nullptr);
  return *m;
}
double number(const mnist::json::Value& v) {
  REQUIRE(v.type == mnist::json::Type::number);
  return std::stod(v.text);
}

}  // namespace

TEST_CASE("a pipe gets the log lines alone, --progress always draws the live line", "[outputs]") {
  const mnist::test::ScratchDir scratch;
  const fs::path dir = scratch.path();
  const Result piped = train(dir / "piped", "");
  INFO(piped.output);
  REQUIRE(piped.code == 0);
  CHECK(piped.output.find('\r') == std::string::npos);
  CHECK(piped.output.find("\x1b[K") == std::string::npos);
  CHECK(piped.output.find("step 20/20") != std::string::npos);  // the log line

  const Result drawn = train(dir / "drawn", "--progress always");
  INFO(drawn.output);
  REQUIRE(drawn.code == 0);
  CHECK(drawn.output.find("\r\x1b[Kstep 20/20 [########################] 100%") !=
        std::string::npos);
  // Every log line starts on a clean line: where the status line was drawn, it is erased first.
  std::istringstream lines(drawn.output);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t log = line.find("] info ");
    if (log == std::string::npos || log < 9) continue;
    const std::size_t before = log - 9;  // "[hh:mm:ss" starts here
    CHECK((before == 0 || (before >= 4 && line.compare(before - 4, 4, "\r\x1b[K") == 0)));
  }
  CHECK(train(dir / "bad", "--progress sometimes").code == 2);
}

TEST_CASE("TensorBoard event files decode with protobuf and match metrics.jsonl", "[outputs]") {
  const std::string python = mnist::test::find_python("google.protobuf");
  INFO("no python3 with google.protobuf (scripts/setup.sh installs python3-protobuf)");
  REQUIRE(!python.empty());
  const mnist::test::ScratchDir scratch;
  const fs::path dir = scratch.path();
  const Result run = train(dir / "run", "--set output.tensorboard=true");
  INFO(run.output);
  REQUIRE(run.code == 0);
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir / "run" / "tb"))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(entry.path());
  REQUIRE(files.size() == 1);

  const Result decoded =
      shell("'" + python + "' '" MNIST_SOURCE_DIR "/tests/integration/tools/read_tfevents.py' '" +
            files[0].string() + "' 2>&1");
  INFO(decoded.output);
  REQUIRE(decoded.code == 0);
  // step -> tag -> value, from the events and from metrics.jsonl.
  std::map<int64_t, std::map<std::string, double>> events, metrics;
  std::istringstream event_lines(decoded.output);
  int version_events = 0;
  for (std::string line; std::getline(event_lines, line);) {
    const mnist::json::Value e = mnist::json::parse(line, "read_tfevents.py output");
    if (const mnist::json::Value* version = e.find("file_version")) {
      CHECK(version->text == "brain.Event:2");
      ++version_events;
      continue;
    }
    for (const auto& [tag, value] : member(e, "scalars").members)
      events[static_cast<int64_t>(number(member(e, "step")))][tag] = number(value);
  }
  CHECK(version_events == 1);
  std::ifstream jsonl(dir / "run" / "metrics.jsonl");
  for (std::string line; std::getline(jsonl, line);) {
    const mnist::json::Value m = mnist::json::parse(line, "metrics.jsonl");
    const auto step = static_cast<int64_t>(number(member(m, "step")));
    const std::string prefix = member(m, "type").text == "train" ? "train/" : "eval/";
    metrics[step][prefix + "loss"] = number(member(m, "loss"));
    metrics[step][prefix + "accuracy"] = number(member(m, "accuracy"));
    if (prefix == "train/") {
      metrics[step]["lr"] = number(member(m, "lr"));
      metrics[step]["samples_per_second"] = number(member(m, "samples_per_second"));
    }
  }
  REQUIRE(metrics.size() == 4);  // steps 5, 10, 15, 20 (evaluations at 10 and 20)
  REQUIRE(events.size() == metrics.size());
  for (const auto& [step, tags] : metrics) {
    INFO("step " << step);
    REQUIRE(events.count(step) == 1);
    CHECK(events[step].size() == tags.size());
    for (const auto& [tag, value] : tags) {
      INFO(tag);
      REQUIRE(events[step].count(tag) == 1);
      CHECK(events[step][tag] ==
            Approx(value).epsilon(1e-6));  // float in the event, double in JSON
    }
  }
}

TEST_CASE("scripts/plot_run.py draws two runs into one PNG", "[outputs]") {
  const std::string python = mnist::test::find_python("matplotlib");
  INFO("no python3 with matplotlib (scripts/setup.sh installs python3-matplotlib)");
  REQUIRE(!python.empty());
  const mnist::test::ScratchDir scratch;
  const fs::path dir = scratch.path();
  REQUIRE(train(dir / "a", "").code == 0);
  REQUIRE(train(dir / "b", "--set optimizer.lr=0.01").code == 0);
  const fs::path png = dir / "runs.png";
  const Result plot =
      shell("'" + python + "' '" MNIST_SOURCE_DIR "/scripts/plot_run.py' '" + (dir / "a").string() +
            "' '" + (dir / "b").string() + "' -o '" + png.string() + "' 2>&1");
  INFO(plot.output);
  REQUIRE(plot.code == 0);
  CHECK(plot.output.find("(2 runs)") != std::string::npos);
  std::ifstream in(png, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 10000);  // a drawn figure, not an empty canvas
  CHECK(bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  // IHDR: width and height, big-endian, at bytes 16 and 20: 11 x 4.2 inches at 100 dpi.
  auto be32 = [&](std::size_t at) {
    return (uint32_t(uint8_t(bytes[at])) << 24) | (uint32_t(uint8_t(bytes[at + 1])) << 16) |
           (uint32_t(uint8_t(bytes[at + 2])) << 8) | uint32_t(uint8_t(bytes[at + 3]));
  };
  CHECK(be32(16) == 1100);
  CHECK(be32(20) == 420);
  // A folder that is not a run is refused by name.
  const Result bad = shell("'" + python + "' '" MNIST_SOURCE_DIR "/scripts/plot_run.py' '" +
                           dir.string() + "' -o '" + png.string() + "' 2>&1");
  CHECK(bad.code != 0);
  CHECK(bad.output.find("no metrics.jsonl") != std::string::npos);
}
