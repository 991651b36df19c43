// The life of a training run as a batch system sees it, tested on the real binary with real
// signals: exact resume, SIGTERM / SIGUSR1 / double SIGINT, SIGKILL in the middle of checkpoint
// writes, damaged and incompatible checkpoints, divergence, and the eval / predict commands.
// Test names avoid ',' ';' and a leading '-': CTest and Catch's command line would split them.
//
// Every run is a child process started with fork/exec (so the test knows its pid and can signal
// it), working in the source directory, with stdout and stderr going to one log file. Runs use
// configs/cpu_quickstart.yaml with 32 images per step, so each step takes milliseconds.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <spdlog/logger.h>

#include "config/experiment.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"
#include "support/files.hpp"
#include "train/checkpoint.hpp"

namespace {

namespace fs = std::filesystem;
using mnist::test::read_text;
using mnist::test::require_mnist_small;
using mnist::test::TempDir;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The time bounds below are what a user waits on an ordinary machine. Under ThreadSanitizer the
// binary runs 5-15x slower, so the sanitizer job multiplies them by MNIST_TEST_TIME_SCALE.
double time_scale() {
  const char* text = std::getenv("MNIST_TEST_TIME_SCALE");
  if (text == nullptr || *text == '\0') return 1.0;
  char* end = nullptr;
  const double scale = std::strtod(text, &end);
  if (*end != '\0' || !(scale >= 1.0)) {
    throw std::runtime_error(std::string("MNIST_TEST_TIME_SCALE='") + text +
                             "' is not a number >= 1");
  }
  return scale;
}

// One mnist-train process. The exit code follows the shell's convention: the process's own code,
// or 128 + signal number when a signal ended it.
class Child {
 public:
  Child(const std::vector<std::string>& args, fs::path log) : log_(std::move(log)) {
    std::vector<std::string> argv_text = {MNIST_TRAIN_BIN};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log_path = log_.string();
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      // Only async-signal-safe calls between fork and exec. The test runner's blocked signals
      // would be inherited by the binary: unblock them all.
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0 || ::chdir(MNIST_SOURCE_DIR) != 0) ::_exit(126);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  std::string output() const { return read_text(log_); }
  void signal(int sig) const { REQUIRE(::kill(pid_, sig) == 0); }

  // Polls the log until it contains `text`; false if the process ended or time ran out first.
  bool wait_for_output(const std::string& text, double timeout_seconds) {
    const auto start = Clock::now();
    while (seconds_since(start) < timeout_seconds) {
      if (output().find(text) != std::string::npos) return true;
      if (exited_by_now()) return output().find(text) != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  // Waits for the end of the process (killing it after `timeout_seconds`: a hung run fails the
  // test instead of hanging the suite).
  int wait(double timeout_seconds = 120) {
    const auto start = Clock::now();
    while (!exited_by_now()) {
      if (seconds_since(start) > timeout_seconds) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status_, 0);
        reaped_ = true;
        FAIL("mnist-train did not exit within " << timeout_seconds << " s; output:\n" << output());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (WIFEXITED(status_)) return WEXITSTATUS(status_);
    if (WIFSIGNALED(status_)) return 128 + WTERMSIG(status_);
    return -1;
  }

 private:
  bool exited_by_now() {
    if (reaped_) return true;
    const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
    if (r == pid_) reaped_ = true;
    return reaped_;
  }

  fs::path log_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

struct Ran {
  int code = -1;
  std::string output;
};

// Runs mnist-train to its end.
Ran run(const std::vector<std::string>& args, const fs::path& log) {
  Child child(args, log);
  Ran r;
  r.code = child.wait();
  r.output = child.output();
  return r;
}

const char* kConfig = "configs/cpu_quickstart.yaml";

// A quickstart training run on the small real subset (data/mnist-small: loads and evaluates fast)
// of `steps` steps of 32 images into `dir`, logging every step, plus
// `extra` overrides / flags. One kernel thread: on a loaded machine two threads that wait on each
// other made a 32-image step up to 20x slower (40 steps in 11.5 s instead of 0.8 s).
std::vector<std::string> train_args(const fs::path& dir, int steps,
                                    std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--config", kConfig,
                                   "--set",    "train.batch_per_device=32",
                                   "--set",    "train.steps=" + std::to_string(steps),
                                   "--set",    "train.log_every=1",
                                   "--set",    "devices.threads=1",
                                   "--set",    "data.dataset=mnist-small",
                                   "--set",    "output.dir=" + dir.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

const mnist::Model& quickstart_model() {
  static const mnist::Model model = mnist::Model::build(
      mnist::load_experiment(std::string(MNIST_SOURCE_DIR) + "/" + kConfig).model);
  return model;
}

// Where a run directory's checkpoint of `step` lives, as users see it documented.
fs::path checkpoint_path(const fs::path& run_dir, int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "step-%06lld.safetensors", static_cast<long long>(step));
  return run_dir / "checkpoints" / name;
}

// The run directory's checkpoints as --resume auto sees them. Its warnings (removing a killed
// writer's temporary file) are expected here and would only clutter the test log.
mnist::CheckpointDirectory checkpoint_directory(const fs::path& run_dir, int keep) {
  return mnist::CheckpointDirectory(run_dir.string(), keep,
                                    std::make_shared<spdlog::logger>("lifecycle-test"));
}

// Final-named checkpoint files in the run directory, scanned by hand (no clean-up side effects).
std::vector<fs::path> checkpoint_files(const fs::path& run_dir) {
  std::vector<fs::path> files;
  if (!fs::exists(run_dir / "checkpoints")) return files;
  for (const auto& entry : fs::directory_iterator(run_dir / "checkpoints")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) == 0 && entry.path().extension() == ".safetensors")
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());  // zero-padded step numbers sort by step
  return files;
}

bool has_temp_file(const fs::path& run_dir) {
  if (!fs::exists(run_dir / "checkpoints")) return false;
  for (const auto& entry : fs::directory_iterator(run_dir / "checkpoints"))
    if (entry.path().filename().string().find(".tmp.") != std::string::npos) return true;
  return false;
}

// How many elements of two float buffers differ bit-wise (sizes must match).
std::size_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// Two checkpoints hold the same step and bit-identical parameters, batch-norm statistics and
// optimizer moments.
void check_same_checkpoint(const fs::path& expected, const fs::path& actual) {
  INFO("expected " << expected.string() << ", actual " << actual.string());
  const mnist::CheckpointState a = mnist::load_checkpoint(expected.string(), quickstart_model());
  const mnist::CheckpointState b = mnist::load_checkpoint(actual.string(), quickstart_model());
  CHECK(a.step == b.step);
  CHECK(bit_differences(a.params, b.params) == 0);
  CHECK(bit_differences(a.state, b.state) == 0);
  CHECK(bit_differences(a.moment1, b.moment1) == 0);
  CHECK(bit_differences(a.moment2, b.moment2) == 0);
}

// step -> the loss as metrics.jsonl records it (the text, so equality is exact).
std::map<int64_t, std::string> logged_losses(const fs::path& run_dir) {
  std::map<int64_t, std::string> losses;
  std::ifstream in(run_dir / "metrics.jsonl");
  static const std::regex train_line(R"re("type":"train","step":(\d+),.*"loss":([^,]+),)re");
  std::string line;
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, train_line)) losses[std::stoll(m[1])] = m[2];
  return losses;
}

// The step named by the run's "stopped at step K of N" line, or -1.
int64_t stopped_at(const std::string& output) {
  static const std::regex stopped(R"(stopped at step (\d+) of)");
  std::smatch m;
  return std::regex_search(output, m, stopped) ? std::stoll(m[1]) : -1;
}

// The checkpoint and step a run's "resumed from PATH at step K" line names ({"", -1} if none).
std::pair<std::string, int64_t> resumed_from(const std::string& output) {
  static const std::regex resumed(R"(resumed from (\S+) at step (\d+))");
  std::smatch m;
  if (!std::regex_search(output, m, resumed)) return {"", -1};
  return {m[1], std::stoll(m[2])};
}

}  // namespace

TEST_CASE("N steps straight equal N/2 steps then a resume and N/2 more bit for bit",
          "[lifecycle]") {
  require_mnist_small();
  TempDir tmp("life", "exact");
  const int n = 8;
  const Ran straight = run(train_args(tmp / "straight", n), tmp / "straight.log");
  INFO(straight.output);
  REQUIRE(straight.code == 0);

  const Ran first = run(train_args(tmp / "halves", n / 2), tmp / "first.log");
  INFO(first.output);
  REQUIRE(first.code == 0);
  const Ran second = run(train_args(tmp / "halves", n, {"--resume", "auto"}), tmp / "second.log");
  INFO(second.output);
  REQUIRE(second.code == 0);
  CHECK(resumed_from(second.output).second == n / 2);

  check_same_checkpoint(checkpoint_path(tmp / "straight", n), checkpoint_path(tmp / "halves", n));
  const auto expected = logged_losses(tmp / "straight");
  const auto resumed = logged_losses(tmp / "halves");
  REQUIRE(expected.size() == n);
  REQUIRE(resumed.size() == n);  // steps 1..n/2 from the first run, the rest after the resume
  for (int step = n / 2 + 1; step <= n; ++step) {
    INFO("step " << step);
    CHECK(resumed.at(step) == expected.at(step));
  }
}

TEST_CASE("SIGTERM ends the run with exit 3 and a checkpoint that --resume auto completes exactly",
          "[lifecycle]") {
  require_mnist_small();
  TempDir tmp("life", "sigterm");
  const int steps = 60;
  Child child(train_args(tmp / "run", steps), tmp / "run.log");
  REQUIRE(child.wait_for_output("step 10/60", 60));
  const auto signalled = Clock::now();
  child.signal(SIGTERM);
  const int code = child.wait();
  const double exit_seconds = seconds_since(signalled);
  const std::string output = child.output();
  INFO(output);
  CHECK(code == 3);
  CHECK(exit_seconds < 5 * time_scale());
  const int64_t reached = stopped_at(output);
  REQUIRE(reached >= 10);
  REQUIRE(reached < steps);
  // checkpoint.every is 0: the only checkpoint is the one the stop request wrote.
  const auto files = checkpoint_files(tmp / "run");
  REQUIRE(files.size() == 1);
  CHECK(files[0] == checkpoint_path(tmp / "run", reached));
  CHECK(mnist::load_checkpoint(files[0].string(), quickstart_model()).step == reached);

  const Ran resumed = run(train_args(tmp / "run", steps, {"--resume", "auto"}), tmp / "resume.log");
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  CHECK(resumed_from(resumed.output).second == reached);

  const Ran straight = run(train_args(tmp / "straight", steps), tmp / "straight.log");
  INFO(straight.output);
  REQUIRE(straight.code == 0);
  check_same_checkpoint(checkpoint_path(tmp / "straight", steps),
                        checkpoint_path(tmp / "run", steps));
  const auto expected = logged_losses(tmp / "straight");
  const auto after_resume = logged_losses(tmp / "run");
  for (int64_t step = reached + 1; step <= steps; ++step) {
    INFO("step " << step);
    CHECK(after_resume.at(step) == expected.at(step));
  }
}

TEST_CASE("SIGUSR1 checkpoints and exits 75 and a second SIGINT exits 130 at once", "[lifecycle]") {
  require_mnist_small();
  TempDir tmp("life", "usr1");
  {
    Child child(train_args(tmp / "usr1", 99), tmp / "usr1.log");
    REQUIRE(child.wait_for_output("step 10/99", 60));
    child.signal(SIGUSR1);
    const int code = child.wait();
    const std::string output = child.output();
    INFO(output);
    CHECK(code == 75);
    const int64_t reached = stopped_at(output);
    REQUIRE(reached >= 10);
    REQUIRE(reached < 99);
    const auto files = checkpoint_files(tmp / "usr1");
    REQUIRE(files.size() == 1);
    CHECK(files[0] == checkpoint_path(tmp / "usr1", reached));
    CHECK(mnist::load_checkpoint(files[0].string(), quickstart_model()).step == reached);
  }
  {
    // Large steps, so the first SIGINT's "finish the step" is still in progress when the second
    // one arrives. The second is sent only after the first was handled: two signals pending at
    // once would merge into one.
    Child child(train_args(tmp / "int", 1000, {"--set", "train.batch_per_device=2048"}),
                tmp / "int.log");
    REQUIRE(child.wait_for_output("devices:", 60));
    child.signal(SIGINT);
    REQUIRE(child.wait_for_output("stop requested", 10));
    const auto second = Clock::now();
    child.signal(SIGINT);
    const int code = child.wait();
    const double exit_seconds = seconds_since(second);
    const std::string output = child.output();
    INFO(output);
    CHECK(code == 130);
    CHECK(exit_seconds < 1 * time_scale());
    CHECK(output.find("second interrupt") != std::string::npos);
  }
}

TEST_CASE("SIGKILL at random moments never leaves the newest checkpoint unreadable",
          "[lifecycle]") {
  require_mnist_small();
  TempDir tmp("life", "sigkill");
  const int steps = 60;
  const std::vector<std::string> every_step = {"--set", "checkpoint.every=1", "--resume", "auto"};
  const Ran straight = run(train_args(tmp / "straight", steps), tmp / "straight.log");
  INFO(straight.output);
  REQUIRE(straight.code == 0);
  const fs::path reference = checkpoint_path(tmp / "straight", steps);

  // Each life resumes the run and is killed at a random moment of its first steps (each about
  // 15 ms of training and 20 ms of checkpoint writing with checkpoint.every=1). A life that
  // completes the run is checked like the others and the next one starts a fresh run.
  const unsigned seed = std::random_device{}();
  INFO("random seed " << seed);
  std::mt19937 rng(seed);
  // Kills spread over 250 ms, or over five steps where steps are slower (a sanitized build).
  std::uniform_int_distribution<int> delay_ms(0, static_cast<int>(250 * time_scale()));
  const fs::path run_dir = tmp / "run";
  const int kills = 20;
  int64_t newest_step = 0;
  int kills_mid_write = 0, completed = 0;
  for (int life = 0; life < kills; ++life) {
    const int delay = delay_ms(rng);
    INFO("life " << life << ", killed after " << delay << " ms");
    {
      Child child(train_args(run_dir, steps, every_step), tmp / "life.log");
      // Timed from the start of training, so a slow start-up on a loaded machine cannot turn
      // every kill into one before the first checkpoint.
      REQUIRE(child.wait_for_output("devices:", 60));
      std::this_thread::sleep_for(std::chrono::milliseconds(delay));
      child.signal(SIGKILL);
      const int code = child.wait();
      INFO(child.output());
      REQUIRE((code == 128 + SIGKILL || code == 0));  // 0: it finished before the kill
      if (code == 0) {
        check_same_checkpoint(reference, checkpoint_path(run_dir, steps));
        ++completed;
        fs::remove_all(run_dir);
        newest_step = 0;
        continue;
      }
    }
    kills_mid_write += has_temp_file(run_dir);
    const auto files = checkpoint_files(run_dir);
    if (files.empty()) continue;  // killed before its first checkpoint
    // Writes are atomic: every final-named file is complete, so the newest one is the one found.
    const auto found = checkpoint_directory(run_dir, 3).latest_valid(quickstart_model());
    REQUIRE(found);
    CHECK(found->skipped.empty());
    CHECK(fs::path(found->path) == files.back());
    CHECK(found->state.step >= newest_step);  // progress is never lost
    newest_step = found->state.step;

    if (life % 7 == 6) {
      // Finish a copy of the run: it must end exactly where the uninterrupted run did.
      const fs::path copy = tmp / ("finish-" + std::to_string(life));
      fs::copy(run_dir, copy, fs::copy_options::recursive);
      const Ran finished = run(train_args(copy, steps, every_step), tmp / "finish.log");
      INFO(finished.output);
      REQUIRE(finished.code == 0);
      CHECK(resumed_from(finished.output).second == newest_step);
      check_same_checkpoint(reference, checkpoint_path(copy, steps));
      ++completed;
    }
  }
  CHECK(completed >= 1);
  // Not asserted (it depends on timing), but shown with -s: how many kills hit a write.
  SUCCEED(kills_mid_write << " of " << kills << " kills left a half-written checkpoint");
}

TEST_CASE(
    "resume auto skips a truncated newest checkpoint and a changed lr is refused unless forced",
    "[lifecycle]") {
  require_mnist_small();
  TempDir tmp("life", "damaged");
  const std::vector<std::string> every_two = {"--set", "checkpoint.every=2", "--set",
                                              "checkpoint.keep=5"};
  const fs::path run_dir = tmp / "run";
  const Ran first = run(train_args(run_dir, 6, every_two), tmp / "first.log");
  INFO(first.output);
  REQUIRE(first.code == 0);
  const fs::path newest = checkpoint_path(run_dir, 6);
  REQUIRE(fs::exists(newest));
  fs::resize_file(newest, fs::file_size(newest) / 2);

  auto resume_args = every_two;
  resume_args.insert(resume_args.end(), {"--resume", "auto"});
  const Ran resumed = run(train_args(run_dir, 8, resume_args), tmp / "resume.log");
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  CHECK(resumed.output.find(newest.filename().string()) != std::string::npos);  // the warning
  CHECK(resumed_from(resumed.output) ==
        std::make_pair(checkpoint_path(run_dir, 4).string(), int64_t{4}));
  const Ran straight = run(train_args(tmp / "straight", 8), tmp / "straight.log");
  INFO(straight.output);
  REQUIRE(straight.code == 0);
  check_same_checkpoint(checkpoint_path(tmp / "straight", 8), checkpoint_path(run_dir, 8));

  // A checkpoint trained with another learning rate.
  const std::string from = checkpoint_path(run_dir, 8).string();
  const std::vector<std::string> other_lr = {"--set", "optimizer.lr=0.002", "--resume", from};
  const Ran refused = run(train_args(tmp / "other-lr", 10, other_lr), tmp / "refused.log");
  INFO(refused.output);
  CHECK(refused.code == 2);
  CHECK(refused.output.find("optimizer.lr") != std::string::npos);
  CHECK(refused.output.find(from) != std::string::npos);
  CHECK(checkpoint_files(tmp / "other-lr").empty());

  auto forced_args = other_lr;
  forced_args.push_back("--force-resume");
  const Ran forced = run(train_args(tmp / "other-lr", 10, forced_args), tmp / "forced.log");
  INFO(forced.output);
  CHECK(forced.code == 0);
  CHECK(forced.output.find("optimizer.lr") != std::string::npos);  // the difference is logged
  CHECK(resumed_from(forced.output) == std::make_pair(from, int64_t{8}));
  CHECK(mnist::load_checkpoint(checkpoint_path(tmp / "other-lr", 10).string(), quickstart_model())
            .step == 10);
}

TEST_CASE("a diverging run exits 4 naming the step and keeps its last good checkpoint",
          "[lifecycle]") {
  require_mnist_small();
  TempDir tmp("life", "diverge");
  const std::vector<std::string> blow_up = {
      "--set", "optimizer.type=sgd", "--set", "optimizer.lr=1e6",
      "--set", "checkpoint.every=1", "--set", "checkpoint.keep=100"};
  const Ran r = run(train_args(tmp / "run", 50, blow_up), tmp / "run.log");
  INFO(r.output);
  REQUIRE(r.code == 4);
  std::smatch m;
  const std::regex diverged(R"(diverged: step (\d+))");
  REQUIRE(std::regex_search(r.output, m, diverged));
  const int64_t bad_step = std::stoll(m[1]);
  CHECK(bad_step >= 1);
  CHECK(bad_step <= 50);
  const auto files = checkpoint_files(tmp / "run");
  if (!files.empty()) {
    const auto found = checkpoint_directory(tmp / "run", 100).latest_valid(quickstart_model());
    REQUIRE(found);
    CHECK(found->skipped.empty());
    CHECK(found->state.step < bad_step);
    const auto& params = found->state.params;
    CHECK(std::all_of(params.begin(), params.end(), [](float p) { return std::isfinite(p); }));
  }
}

namespace {

// The integers of the confusion matrix rows printed by `mnist-train eval` ([true][predicted]).
std::vector<std::vector<int64_t>> confusion_rows(const std::string& output, int classes) {
  std::vector<std::vector<int64_t>> rows;
  const std::size_t at = output.find("confusion matrix");
  if (at == std::string::npos) return rows;
  std::istringstream in(output.substr(at));
  std::string line;
  std::getline(in, line);  // the title
  std::getline(in, line);  // the column header
  for (int t = 0; t < classes && std::getline(in, line); ++t) {
    std::istringstream fields(line);
    int64_t label = -1, v = 0;
    fields >> label;
    if (label != t) break;
    std::vector<int64_t> row;
    while (fields >> v) row.push_back(v);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

TEST_CASE("eval and predict read a checkpoint and a damaged one is exit 2 naming the file",
          "[lifecycle]") {
  require_mnist_small();
  TempDir tmp("life", "eval");
  const Ran trained = run(train_args(tmp / "run", 10), tmp / "train.log");
  INFO(trained.output);
  REQUIRE(trained.code == 0);
  const std::string ckpt = checkpoint_path(tmp / "run", 10).string();

  const std::string data = std::string(MNIST_SOURCE_DIR) + "/data/mnist-small/";
  const mnist::ImageSet test =
      mnist::read_idx_pair(data + "t10k-images-idx3-ubyte", data + "t10k-labels-idx1-ubyte", 10);
  const Ran eval = run({"eval", "--checkpoint", ckpt}, tmp / "eval.log");
  INFO(eval.output);
  REQUIRE(eval.code == 0);
  const auto confusion = confusion_rows(eval.output, 10);
  REQUIRE(confusion.size() == 10);
  int64_t total = 0, correct = 0;
  std::vector<int64_t> per_label(10, 0);
  for (int i = 0; i < test.count; ++i) ++per_label[test.labels[i]];
  for (int t = 0; t < 10; ++t) {
    REQUIRE(confusion[t].size() == 10);
    int64_t row_sum = 0;
    for (int64_t v : confusion[t]) row_sum += v;
    CHECK(row_sum == per_label[t]);  // rows are the true classes
    total += row_sum;
    correct += confusion[t][t];
  }
  CHECK(total == test.count);
  // The printed accuracy is the matrix's diagonal over its total.
  std::smatch m;
  const std::regex accuracy_line(R"(test images (\d+): loss [0-9.]+, accuracy ([0-9.]+))");
  REQUIRE(std::regex_search(eval.output, m, accuracy_line));
  CHECK(std::stoll(m[1]) == test.count);
  CHECK(std::stod(m[2]) == Approx(static_cast<double>(correct) / total).margin(6e-5));

  // A PGM of the first test image, as an image editor would write it (with a comment).
  const fs::path pgm = tmp / "digit.pgm";
  {
    std::ofstream out(pgm, std::ios::binary);
    out << "P5\n# a test digit\n" << test.cols << " " << test.rows << "\n255\n";
    out.write(reinterpret_cast<const char*>(test.pixels.data()), test.pixels_per_image());
  }
  const Ran predicted = run({"predict", "--checkpoint", ckpt, pgm.string()}, tmp / "predict.log");
  INFO(predicted.output);
  REQUIRE(predicted.code == 0);
  const std::regex class_line(R"(digit\.pgm\[0\] class (\d) p=([0-9.]+) probabilities ([0-9. ]+))");
  REQUIRE(std::regex_search(predicted.output, m, class_line));
  std::istringstream probabilities(m[3].str());
  double p = 0, sum = 0, best = 0;
  while (probabilities >> p) {
    sum += p;
    best = std::max(best, p);
  }
  CHECK(sum == Approx(1.0).margin(1e-3));
  CHECK(std::stod(m[2]) == Approx(best).margin(1e-4));  // the class printed is the most probable

  // Damage: a header length beyond the file, then tensor data cut short.
  const fs::path bad_header = tmp / "bad-header.safetensors";
  const fs::path cut = tmp / "cut.safetensors";
  fs::copy_file(ckpt, bad_header);
  fs::copy_file(ckpt, cut);
  {
    std::fstream f(bad_header, std::ios::binary | std::ios::in | std::ios::out);
    f.write("\xff\xff\xff\xff\xff\xff\x00\x00", 8);
  }
  fs::resize_file(cut, fs::file_size(cut) - 100);
  for (const fs::path& damaged : {bad_header, cut}) {
    for (const std::string command : {"eval", "predict"}) {
      std::vector<std::string> args = {command, "--checkpoint", damaged.string()};
      if (command == "predict") args.push_back(pgm.string());
      const Ran r = run(args, tmp / "damaged.log");
      INFO(command << " " << damaged.string() << ":\n" << r.output);
      CHECK(r.code == 2);
      CHECK(r.output.find(damaged.string()) != std::string::npos);
    }
  }
}

namespace {

// The codes of the README's "Exit codes" table, in its order.
std::vector<int> readme_exit_codes() {
  std::ifstream in(fs::path(MNIST_SOURCE_DIR) / "README.md");
  std::vector<int> codes;
  std::string line;
  bool in_section = false;
  const std::regex row(R"(^\| (\d+) \|)");
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) in_section = line == "### Exit codes";  // to the next heading
    std::smatch m;
    if (in_section && std::regex_search(line, m, row)) codes.push_back(std::stoi(m[1]));
  }
  return codes;
}

// Runs the case the README gives for `code` and returns what the tool exited with and said.
Ran exit_code_case(int code, const fs::path& dir) {
  const fs::path log = dir / ("exit-" + std::to_string(code) + ".log");
  auto signalled = [&](int signal_number) {
    Child child(train_args(dir / "signalled", 99), log);
    if (!child.wait_for_output("step 10/99", 60)) FAIL("the run never reached step 10");
    child.signal(signal_number);
    const int got = child.wait();
    return Ran{got, child.output()};
  };
  switch (code) {
    case 0:  // done: --dry-run validates and plans
      return run(train_args(dir / "dry", 5, {"--dry-run"}), log);
    case 1:  // a runtime failure: a worker stalls (beyond a watchdog set to a millisecond)
      return run(train_args(dir / "stall", 3,
                            {"--set", "train.watchdog_seconds=0.001", "--set",
                             "train.batch_per_device=2048"}),
                 log);
    case 2:  // a bad config key
      return run(train_args(dir / "bad", 1, {"--set", "optimizer.nonsense=1"}), log);
    case 3:
      return signalled(SIGTERM);
    case 4:  // the loss stops being finite
      return run(train_args(dir / "diverge", 50,
                            {"--set", "optimizer.type=sgd", "--set", "optimizer.lr=1e6"}),
                 log);
    case 75:
      return signalled(SIGUSR1);
    default:
      FAIL("the README lists exit code " << code << ", which no case here produces");
  }
  return Ran{};
}

}  // namespace

TEST_CASE("every exit code of the README's table is what the tool returns in its case",
          "[lifecycle]") {
  require_mnist_small();
  const std::vector<int> codes = readme_exit_codes();
  // The table as main() maps outcomes (apps/mnist-train/main.cpp); 130 is the second SIGINT, in
  // code 3's row (tested above).
  CHECK(codes == std::vector<int>{0, 1, 2, 3, 4, 75});
  for (const int code : codes) {
    CAPTURE(code);
    TempDir tmp("life", "exit-" + std::to_string(code));
    const Ran r = exit_code_case(code, tmp.path);
    INFO(r.output);
    CHECK(r.code == code);
  }
}

TEST_CASE("an unusable output.dir is the config's error: exit 2 naming the key", "[lifecycle]") {
  require_mnist_small();
  TempDir tmp("life", "unusable-dir");
  for (const fs::path& dir : {fs::path("/dev/null") / "run",   // below a regular file
                              tmp / std::string(300, 'x')}) {  // a component beyond NAME_MAX
    CAPTURE(dir.string());
    const Ran r = run(train_args(dir, 1), tmp / "run.log");
    INFO(r.output);
    CHECK(r.code == 2);
    CHECK(r.output.find("output.dir") != std::string::npos);
    CHECK(r.output.find("cannot create the run directory") != std::string::npos);
  }
}
