// Run folders on shared boxes and clusters: a fresh run never mixes with an earlier one, output.dir
// templates give each array task its own folder, and a lock keeps a second process out.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "support/command.hpp"
#include "support/idx_writer.hpp"

namespace fs = std::filesystem;

namespace {

using Result = mnist::test::CommandResult;

// Runs the binary from the source directory with `env` (a shell prefix such as "A=1 ") and `args`
// (shell-quoted). The Slurm variables of a test itself run under Slurm are removed first, so each
// case sets exactly the ones it means.
Result run_cli(const std::string& env, const std::string& args) {
  const std::string command = "cd '" MNIST_SOURCE_DIR
                              "' && env -u SLURM_JOB_ID -u SLURM_ARRAY_JOB_ID "
                              "-u SLURM_ARRAY_TASK_ID " +
                              env + " timeout -k 5 120 '" MNIST_TRAIN_BIN "' " + args + " 2>&1";
  return mnist::test::run_command(command);
}

// Two steps of the quick-start config on the small real subset, one kernel thread.
std::string train_args(const std::string& dir, const std::string& extra = "") {
  return "--config configs/cpu_quickstart.yaml --set data.dataset=mnist-small "
         "--set train.steps=2 --set train.batch_per_device=16 --set train.log_every=1 "
         "--set devices.threads=1 --set 'output.dir=" +
         dir + "' " + extra;
}

void require_data() {
  const fs::path images = fs::path(MNIST_SOURCE_DIR) / "data/mnist-small/train-images-idx3-ubyte";
  if (!fs::exists(images) && !fs::exists(images.string() + ".gz"))
    FAIL("these tests train on data/mnist-small: run scripts/fetch_data.sh mnist-small first");
}

int count_lines(const fs::path& path, const std::string& needle) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.find(needle) != std::string::npos;
  return n;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a fresh run into a used output.dir is refused (exit 2), --overwrite replaces it",
          "[cli][run_folder]") {
  require_data();
  mnist::test::ScratchDir tmp;
  const std::string dir = tmp.file("run");
  Result r = run_cli("", train_args(dir));
  INFO(r.output);
  REQUIRE(r.code == 0);
  REQUIRE(count_lines(fs::path(dir) / "metrics.jsonl", "\"type\":\"train\"") == 2);

  r = run_cli("", train_args(dir));
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(contains(r.output, dir));
  CHECK(contains(r.output, "--resume"));
  CHECK(contains(r.output, "--overwrite"));
  // Refused before anything was written: the earlier run's metrics are as they were.
  CHECK(count_lines(fs::path(dir) / "metrics.jsonl", "\"type\":\"train\"") == 2);

  // --resume auto still continues it (here: it is complete at step 2, so a 3-step run adds one).
  r = run_cli("", train_args(dir, "--set train.steps=3 --resume auto"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(count_lines(fs::path(dir) / "metrics.jsonl", "\"type\":\"train\"") == 3);

  r = run_cli("", train_args(dir, "--overwrite"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(count_lines(fs::path(dir) / "metrics.jsonl", "\"type\":\"train\"") == 2);
  CHECK(!fs::exists(fs::path(dir) / "checkpoints/step-000003.safetensors"));
  CHECK(fs::exists(fs::path(dir) / "checkpoints/step-000002.safetensors"));

  // --overwrite deletes only what a run writes: a folder holding anything else is left alone.
  std::ofstream(fs::path(dir) / "notes.txt") << "mine\n";
  r = run_cli("", train_args(dir, "--overwrite"));
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(contains(r.output, "notes.txt"));
  CHECK(fs::exists(fs::path(dir) / "notes.txt"));
  CHECK(fs::exists(fs::path(dir) / "metrics.jsonl"));

  r = run_cli("", train_args(dir, "--overwrite --resume auto"));
  CHECK(r.code == 2);  // the two contradict each other
}

TEST_CASE("a templated output.dir gives one folder per array task, seed and job",
          "[cli][run_folder]") {
  require_data();
  mnist::test::ScratchDir tmp;
  const std::string templ = tmp.path() + "/{name}-{job}-s{seed}";
  for (const char* task : {"0", "1"}) {
    const Result r =
        run_cli(std::string("SLURM_JOB_ID=901 SLURM_ARRAY_JOB_ID=900 SLURM_ARRAY_TASK_ID=") + task,
                train_args(templ));
    INFO(r.output);
    CHECK(r.code == 0);
  }
  CHECK(fs::exists(tmp.file("cpu_quickstart-900_0-s42/metrics.jsonl")));
  CHECK(fs::exists(tmp.file("cpu_quickstart-900_1-s42/metrics.jsonl")));

  // Without an array, the job id; outside Slurm, "local". --dry-run shows the folder it resolves.
  Result r = run_cli("SLURM_JOB_ID=901", train_args(templ, "--set seed=7 --dry-run"));
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(contains(r.output, "cpu_quickstart-901-s7"));
  r = run_cli("", train_args(templ, "--dry-run"));
  CHECK(contains(r.output, "cpu_quickstart-local-s42"));
  CHECK(!fs::exists(tmp.file("cpu_quickstart-local-s42")));  // a dry run writes nothing

  // A value that would move the run elsewhere, and an unknown placeholder, are refused.
  r = run_cli("SLURM_JOB_ID=../x", train_args(templ, "--dry-run"));
  CHECK(r.code == 2);
  CHECK(contains(r.output, "SLURM_JOB_ID='../x'"));
  r = run_cli("", train_args(tmp.path() + "/{seeed}", "--dry-run"));
  CHECK(r.code == 2);
  CHECK(contains(r.output, "unknown placeholder '{seeed}'"));
}

TEST_CASE("a second process on a held run folder is refused (exit 2) naming the holder",
          "[cli][run_folder]") {
  require_data();
  mnist::test::ScratchDir tmp;
  const std::string dir = tmp.file("held");
  fs::create_directories(dir);
  // This test's own process holds the lock the way a running mnist-train does.
  const std::string lock_path = dir + "/.mnist-train.lock";
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  const std::string holder = "pid " + std::to_string(::getpid()) + " on testhost\n";
  REQUIRE(::write(fd, holder.data(), holder.size()) == static_cast<ssize_t>(holder.size()));
  Result r = run_cli("", train_args(dir));
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(contains(r.output, "in use by another mnist-train process"));
  CHECK(contains(r.output, "pid " + std::to_string(::getpid()) + " on testhost"));
  CHECK(!fs::exists(dir + "/config.yaml"));
  r = run_cli("", train_args(dir, "--resume auto"));  // resuming is refused as well
  CHECK(r.code == 2);
  ::close(fd);

  // Released: the folder is usable, and the lock of a finished run is gone with its process.
  r = run_cli("", train_args(dir));
  INFO(r.output);
  CHECK(r.code == 0);
  r = run_cli("", train_args(dir, "--set train.steps=3 --resume auto"));
  CHECK(r.code == 0);
}

TEST_CASE("two mnist-train processes on one run folder: the second is refused while the first runs",
          "[cli][run_folder]") {
  require_data();
  mnist::test::ScratchDir tmp;
  const std::string dir = tmp.file("shared");
  // The first trains for long enough, in the background; SIGTERM ends it (checkpoint, exit 3).
  const std::string first =
      "cd '" MNIST_SOURCE_DIR "' && exec '" MNIST_TRAIN_BIN "' " +
      train_args(dir, "--set train.steps=1000000 --set train.log_every=1000") + " > '" +
      tmp.file("first.log") + "' 2>&1";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", first.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // config.yaml is written after the lock is taken.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(dir + "/config.yaml") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const Result r = run_cli("", train_args(dir, "--resume auto"));
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  INFO(r.output);
  CHECK(r.code == 2);
  CHECK(contains(r.output, "in use by another mnist-train process (pid " + std::to_string(pid)));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 3);
}

TEST_CASE("the sbatch examples checkpoint periodically into one folder per job and array task",
          "[cli][run_folder]") {
  // Each script's mnist-train command, run through a stand-in srun that drops srun's own options,
  // as a --dry-run on the CPU (backend auto falls back when no GPU is visible).
  mnist::test::ScratchDir tmp;
  std::ofstream(tmp.file("srun")) << "#!/bin/sh\n"
                                     "while [ $# -gt 0 ] && [ \"${1#-}\" != \"$1\" ]; do shift; "
                                     "done\nexec \"$@\"\n";
  fs::permissions(tmp.file("srun"), fs::perms::owner_all);
  for (const char* script : {"one_node", "multi_node"}) {
    for (const auto& [env, folder] :
         {std::pair<std::string, std::string>{"SLURM_JOB_ID=77", "runs/two_gpu-77"},
          {"SLURM_JOB_ID=81 SLURM_ARRAY_JOB_ID=80 SLURM_ARRAY_TASK_ID=3", "runs/two_gpu-80_3"}}) {
      const std::string command =
          "cd '" MNIST_SOURCE_DIR "' && env -u SLURM_ARRAY_JOB_ID -u SLURM_ARRAY_TASK_ID PATH='" +
          tmp.path() + "':\"$PATH\" MNIST_TRAIN='" MNIST_TRAIN_BIN "' " + env +
          " bash scripts/slurm/" + script + ".sbatch --dry-run --set devices.backend=auto 2>&1";
      const Result r = mnist::test::run_command(command);
      const std::string& output = r.output;
      INFO(script << ": " << output);
      CHECK(r.code != -1);
      CHECK(r.code == 0);
      CHECK(contains(output, "dir: " + folder + "\n"));
      CHECK(contains(output, "checkpoint:\n  every: 500\n"));
    }
  }
}

TEST_CASE("a run refused before its first step does not make its folder used",
          "[cli][run_folder]") {
  require_data();
  mnist::test::ScratchDir tmp;
  const std::string dir = tmp.file("run");
  // train.epochs=1e308 plans more steps than a run counts: refused by the trainer, after the run
  // folder's config.yaml and metrics.jsonl were opened.
  Result r = run_cli("", train_args(dir, "--unset train.steps --set train.epochs=1e308"));
  INFO(r.output);
  REQUIRE(r.code == 2);
  // The corrected command starts there.
  r = run_cli("", train_args(dir));
  INFO(r.output);
  CHECK(r.code == 0);
}
