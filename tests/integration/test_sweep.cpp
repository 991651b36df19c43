// `mnist-train sweep` on the real binary and data/mnist-small: points as processes on CPU slots,
// the table against each run's summary.json, a SIGTERM mid-way and the rerun that finishes only
// what was left, a bad value refused before anything starts, a diverging point recorded as exit 4
// while the others go on, and the Slurm array's --point / --collect. Each sweep is a few steps of
// 32 images per point, so a point takes about half a second.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/command.hpp"
#include "support/files.hpp"
#include "support/python.hpp"

namespace {

namespace fs = std::filesystem;
using mnist::test::read_text;
using mnist::test::require_mnist_small;
using mnist::test::shell_quote;
using mnist::test::TempDir;

// The sweep's command line: the quickstart config on mnist-small, `steps` steps per point.
std::vector<std::string> sweep_args(const fs::path& out, int steps,
                                    const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"sweep",
                                   "--config",
                                   "configs/cpu_quickstart.yaml",
                                   "--set",
                                   "data.dataset=mnist-small",
                                   "--set",
                                   "train.steps=" + std::to_string(steps),
                                   "--set",
                                   "train.batch_per_device=32",
                                   "--set",
                                   "train.log_every=5",
                                   "--out",
                                   out.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

mnist::test::CommandResult run_sweep(const std::vector<std::string>& args) {
  std::string command =
      std::string("cd ") + shell_quote(MNIST_SOURCE_DIR) + " && " + shell_quote(MNIST_TRAIN_BIN);
  for (const std::string& a : args) command += " " + shell_quote(a);
  return mnist::test::run_command(command + " 2>&1");
}

// points.csv as rows of named cells (no quoted commas in the cells these tests read).
std::vector<std::map<std::string, std::string>> read_points_csv(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
  auto split = [](const std::string& text) {
    std::vector<std::string> cells;
    std::string cell;
    bool quoted = false;
    for (char c : text) {
      if (c == '"')
        quoted = !quoted;
      else if (c == ',' && !quoted) {
        cells.push_back(cell);
        cell.clear();
      } else
        cell += c;
    }
    cells.push_back(cell);
    return cells;
  };
  if (std::getline(in, line)) header = split(line);
  while (std::getline(in, line)) {
    const std::vector<std::string> cells = split(line);
    std::map<std::string, std::string> row;
    for (std::size_t i = 0; i < header.size() && i < cells.size(); ++i) row[header[i]] = cells[i];
    rows.push_back(row);
  }
  return rows;
}

// A summary.json value as written ("test_accuracy":0.912345678 -> "0.912345678").
std::string summary_value(const fs::path& run_dir, const std::string& key) {
  const std::string text = read_text(run_dir / "summary.json");
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\"" + key + "\":([^,}]*)"))) return "";
  return m[1];
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("a 2x2x2 sweep on 2 slots gives 8 runs and a table of their summaries", "[sweep]") {
  require_mnist_small();
  TempDir tmp("sweep", "grid");
  const fs::path out = tmp.path / "s";
  const std::vector<std::string> args =
      sweep_args(out, 5,
                 {"--grid", "optimizer.lr=0.001,0.002", "--grid", "train.batch_per_device=16,32",
                  "--seeds", "1,2", "--slots", "2"});
  const auto r = run_sweep(args);
  INFO(r.output);
  REQUIRE(r.code == 0);
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(out / "points")) dirs.push_back(e.path());
  CHECK(dirs.size() == 8);
  const auto rows = read_points_csv(out / "points.csv");
  REQUIRE(rows.size() == 8);
  for (const auto& row : rows) {
    CAPTURE(row.at("point"));
    CHECK(row.at("state") == "done");
    CHECK(row.at("exit_code") == "0");
    const fs::path run_dir = row.at("run_dir");
    REQUIRE(fs::exists(run_dir / "summary.json"));
    // The table's numbers are the summary's, digit for digit.
    CHECK(row.at("test_accuracy") == summary_value(run_dir, "test_accuracy"));
    CHECK(row.at("test_loss") == summary_value(run_dir, "test_loss"));
    CHECK(row.at("steps") == "5");
    // Each point ran with its own settings and half the cores.
    const std::string config = read_text(run_dir / "config.yaml");
    CHECK_THAT(config, Catch::Contains("lr: " + row.at("optimizer.lr")));
    CHECK_THAT(config, Catch::Contains("batch_per_device: " + row.at("train.batch_per_device")));
    CHECK_THAT(config, Catch::Contains("seed: " + row.at("seed")));
    CHECK_THAT(config, Catch::Contains("threads: 1"));
  }
  // One Markdown row per setting, printed at the end and kept beside the CSV.
  const std::string md = read_text(out / "results.md");
  CHECK(count_of(md, "| ok |") == 4);
  CHECK_THAT(md, Catch::StartsWith("ranked by mean test accuracy"));
  CHECK_THAT(r.output, Catch::Contains(md.substr(md.find("| rank |"))));
  CHECK(fs::exists(out / "results.csv"));

  // The same sweep again: every point is done, nothing runs.
  const auto again = run_sweep(args);
  INFO(again.output);
  CHECK(again.code == 0);
  CHECK_THAT(again.output, Catch::Contains("0 to run (8 done already)"));

  // scripts/plot_sweep.py draws the sweep: one row per setting, from the same folder.
  const std::string python = mnist::test::find_python("matplotlib");
  INFO("no python3 with matplotlib (scripts/setup.sh installs python3-matplotlib)");
  REQUIRE(!python.empty());
  const fs::path png = tmp.path / "sweep.png";
  const auto plot = mnist::test::run_command(
      shell_quote(python) + " " +
      shell_quote(std::string(MNIST_SOURCE_DIR) + "/scripts/plot_sweep.py") + " " +
      shell_quote(out.string()) + " -o " + shell_quote(png.string()) + " 2>&1");
  INFO(plot.output);
  CHECK(plot.code == 0);
  CHECK_THAT(plot.output, Catch::Contains("(4 settings)"));
  const std::string bytes = read_text(png);
  CHECK(bytes.size() > 10000);  // a drawn figure, not an empty canvas
  CHECK(bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
}

TEST_CASE("a sweep stopped by SIGTERM exits 3 and its rerun finishes only what was left",
          "[sweep]") {
  require_mnist_small();
  TempDir tmp("sweep", "stop");
  const fs::path out = tmp.path / "s", log = tmp.path / "sweep.log";
  const std::vector<std::string> args =
      sweep_args(out, 150, {"--grid", "optimizer.lr=0.001,0.002,0.003", "--slots", "1"});
  std::vector<std::string> argv_text = {MNIST_TRAIN_BIN};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::chdir(MNIST_SOURCE_DIR) != 0) ::_exit(126);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  // Once the second point has started, stop the sweep.
  const auto start = std::chrono::steady_clock::now();
  while (read_text(log).find("point 1 started") == std::string::npos) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      FAIL("the second point never started:\n" << read_text(log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string first = read_text(log);
  INFO(first);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
  CHECK_THAT(first, Catch::Contains("stopped by SIGTERM"));
  auto rows = read_points_csv(out / "points.csv");
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].at("state") == "done");
  CHECK(rows[1].at("state") == "stopped");  // it wrote a checkpoint and exited 3
  CHECK(rows[1].at("exit_code") == "3");
  CHECK(rows[2].at("state") == "not run");
  CHECK_FALSE(fs::exists(fs::path(rows[2].at("run_dir"))));

  const auto rerun = run_sweep(args);
  INFO(rerun.output);
  CHECK(rerun.code == 0);
  CHECK_THAT(rerun.output, Catch::Contains("2 to run (1 done already)"));
  rows = read_points_csv(out / "points.csv");
  for (const auto& row : rows) CHECK(row.at("state") == "done");
  // The first point ran once; the second resumed from its checkpoint, not from step 0.
  const fs::path logs = out / "logs";
  std::vector<std::string> point_logs;
  for (const auto& e : fs::directory_iterator(logs))
    if (e.path().extension() == ".log") point_logs.push_back(e.path().string());
  std::sort(point_logs.begin(), point_logs.end());
  REQUIRE(point_logs.size() == 3);
  CHECK(count_of(read_text(point_logs[0]), "== mnist-train sweep: ") == 1);
  const std::string second = read_text(point_logs[1]);
  CHECK(count_of(second, "== mnist-train sweep: ") == 2);
  CHECK_THAT(second, Catch::Contains("resumed from"));
  CHECK(count_of(read_text(point_logs[2]), "== mnist-train sweep: ") == 1);
}

TEST_CASE(
    "a sweep with a bad value is refused up front: exit 2 naming the axis, the value and "
    "the point, nothing started",
    "[sweep]") {
  require_mnist_small();
  TempDir tmp("sweep", "bad");
  const fs::path out = tmp.path / "s";
  const auto r =
      run_sweep(sweep_args(out, 5, {"--grid", "optimizer.lr=0.001,fast", "--seeds", "1,2"}));
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK_THAT(r.output, Catch::Contains("sweep point 2 (optimizer.lr=fast seed=1)"));
  CHECK_THAT(r.output, Catch::Contains("axis optimizer.lr, value 'fast'"));
  CHECK_THAT(r.output, Catch::Contains("nothing was started"));
  CHECK_FALSE(fs::exists(out));

  // --dry-run lists every point and where it would run.
  const auto dry = run_sweep(
      sweep_args(out, 5, {"--grid", "optimizer.lr=0.001,0.002", "--seeds", "1,2", "--dry-run"}));
  INFO(dry.output);
  CHECK(dry.code == 0);
  CHECK_THAT(dry.output, Catch::Contains("4 points (2 settings), every one checked"));
  CHECK_THAT(dry.output, Catch::Contains("point   3  optimizer.lr=0.002 seed=2  [new]"));
  CHECK_THAT(dry.output, Catch::Contains("on cpu slot 0"));
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE(
    "a diverging sweep point is recorded as exit 4 with its message and the others go on, "
    "--point and --collect run and gather an array's points",
    "[sweep]") {
  require_mnist_small();
  TempDir tmp("sweep", "diverge");
  const fs::path out = tmp.path / "s";
  const std::vector<std::string> groups = {"--list", "optimizer.type=sgd,optimizer.lr=1e6",
                                           "--list", "optimizer.lr=0.001"};
  // An array's tasks: point 1 first, then the table, which lacks point 0 (exit 5).
  std::vector<std::string> one = groups;
  one.insert(one.end(), {"--point", "1"});
  const auto task1 = run_sweep(sweep_args(out, 20, one));
  INFO(task1.output);
  CHECK(task1.code == 0);
  std::vector<std::string> collect = groups;
  collect.push_back("--collect");
  const auto partial = run_sweep(sweep_args(out, 20, collect));
  INFO(partial.output);
  CHECK(partial.code == 5);
  CHECK_THAT(partial.output,
             Catch::Contains("point 0 (optimizer.type=sgd optimizer.lr=1e6): not run"));

  // Point 0 diverges: the task exits with the point's own code.
  std::vector<std::string> zero = groups;
  zero.insert(zero.end(), {"--point", "0"});
  const auto task0 = run_sweep(sweep_args(out, 20, zero));
  INFO(task0.output);
  CHECK(task0.code == 4);
  const auto table = run_sweep(sweep_args(out, 20, collect));
  INFO(table.output);
  CHECK(table.code == 5);
  auto rows = read_points_csv(out / "points.csv");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].at("state") == "failed");
  CHECK(rows[0].at("exit_code") == "4");
  CHECK_THAT(rows[0].at("message"), Catch::StartsWith("diverged: step"));
  CHECK(rows[1].at("state") == "done");

  // The whole sweep at once, afresh: the failing point does not stop the other, and the sweep's
  // exit code says some point failed (5).
  fs::remove_all(out);
  const auto whole = run_sweep(sweep_args(out, 20, groups));
  INFO(whole.output);
  CHECK(whole.code == 5);
  CHECK_THAT(whole.output, Catch::Contains("point 0 failed (exit 4)"));
  CHECK_THAT(whole.output, Catch::Contains("point 1 done"));
  rows = read_points_csv(out / "points.csv");
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].at("exit_code") == "4");
  CHECK(rows[1].at("state") == "done");
  CHECK_THAT(read_text(out / "results.md"), Catch::Contains("failed (exit 4): diverged: step"));
}
