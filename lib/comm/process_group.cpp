#include "comm/process_group.hpp"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include "core/error.hpp"

namespace mnist {

namespace {

// A launcher variable as an integer >= `min`; RuntimeError naming the variable otherwise.
int env_int(const EnvLookup& env, const char* name, int min) {
  const char* text = env(name);
  MNIST_CHECK(text != nullptr, "{} is unset", name);
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || errno == ERANGE || value < min || value > INT_MAX)
    MNIST_THROW(RuntimeError,
                "environment variable {}='{}' is not a whole number >= {}; it is set by the MPI "
                "launcher (mpirun/srun) and tells each process its place in the job",
                name, text, min);
  return static_cast<int>(value);
}

// Both variables of a launcher, or neither; a rank outside [0, size) is an error.
LaunchInfo from_pair(const EnvLookup& env, const char* size_var, const char* rank_var,
                     const char* launcher) {
  LaunchInfo launch;
  launch.size = env_int(env, size_var, 1);
  launch.rank = env(rank_var) ? env_int(env, rank_var, 0) : -1;
  if (launch.rank >= launch.size)
    MNIST_THROW(RuntimeError, "environment variable {}={} is not below {}={}", rank_var,
                launch.rank, size_var, launch.size);
  launch.launcher = fmt::format("{} ({}={})", launcher, size_var, launch.size);
  return launch;
}

class SingleProcessGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  // One process holds the whole sum already: every collective is the identity.
  void all_reduce_sum(float*, std::size_t) override {}
  void broadcast(void*, std::size_t, int root) override {
    MNIST_CHECK(root == 0, "broadcast root {} in a single-process group", root);
  }
  void barrier() override {}
  std::vector<std::string> all_gather_strings(const std::string& mine) override { return {mine}; }
  void abort(int) override {}
};

}  // namespace

LaunchInfo detect_launch(const EnvLookup& env) {
  if (env("OMPI_COMM_WORLD_SIZE"))
    return from_pair(env, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "Open MPI mpirun");
  if (env("PMI_SIZE")) return from_pair(env, "PMI_SIZE", "PMI_RANK", "a PMI launcher");
  if (env("SLURM_STEP_NUM_TASKS") && env("SLURM_PROCID"))
    return from_pair(env, "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "srun");
  if (env("PMIX_RANK")) {
    LaunchInfo launch;
    launch.size = -1;
    launch.rank = env_int(env, "PMIX_RANK", 0);
    launch.launcher = fmt::format("a PMIx launcher (PMIX_RANK={})", launch.rank);
    return launch;
  }
  return LaunchInfo{};
}

LaunchInfo detect_launch() {
  return detect_launch([](const char* name) -> const char* { return std::getenv(name); });
}

std::string without_mpi_message(const LaunchInfo& launch) {
  const std::string count = launch.size > 0 ? std::to_string(launch.size) : "several";
  return fmt::format(
      "this mnist-train was built without MPI, but {} started it as {} processes (this is rank "
      "{}); the {} processes would each train alone. Rebuild with MPI "
      "(Debian: libopenmpi-dev; cmake -DMNIST_MPI=ON), or run a single process and use "
      "devices.cpu_workers / devices.gpus for parallelism",
      launch.launcher, count, launch.rank, count);
}

void check_mpi_matches_launch(const LaunchInfo& launch, int mpi_size,
                              const std::string& mpi_library) {
  if (launch.size <= 0 || launch.size == mpi_size) return;
  MNIST_THROW(RuntimeError,
              "{} started {} processes but MPI sees a job of {}: the launcher does not belong to "
              "the MPI this mnist-train was built with ({}), so every process would train alone. "
              "Start it with the matching mpirun (see `mnist-train --version`)",
              launch.launcher, launch.size, mpi_size, mpi_library);
}

ProcessGroup::ProcessGroup() {
  char name[256] = {};
  // POSIX leaves truncation unterminated, hence the zeroed buffer and the size - 1.
  host_ = gethostname(name, sizeof(name) - 1) == 0 ? name : "unknown-host";
}

std::string ProcessGroup::label() const {
  return size() > 1 ? fmt::format("rank {} ({})", rank(), host_) : std::string();
}

std::function<void(float*, std::size_t)> ProcessGroup::upper_reduce() {
  if (size() == 1) return {};
  return [this](float* data, std::size_t count) { all_reduce_sum(data, count); };
}

std::unique_ptr<ProcessGroup> ProcessGroup::create(int* argc, char*** argv) {
  return create(argc, argv, detect_launch());
}

std::unique_ptr<ProcessGroup> ProcessGroup::create(int* argc, char*** argv,
                                                   const LaunchInfo& launch) {
  if (!launch.launched()) return detail::make_single_process_group();
  return detail::make_launched_group(argc, argv, launch);
}

std::vector<std::string> agree_on_layout(ProcessGroup& group, int local_workers,
                                         const std::string& devices) {
  const std::vector<std::string> counts = group.all_gather_strings(std::to_string(local_workers));
  const std::vector<std::string> lines = group.all_gather_strings(
      fmt::format("rank {}/{} host {} (node-local rank {}/{}): {} worker{}: {}", group.rank(),
                  group.size(), group.host(), group.local_rank(), group.local_size(), local_workers,
                  local_workers == 1 ? "" : "s", devices));
  for (std::size_t r = 1; r < counts.size(); ++r) {
    if (counts[r] == counts[0]) continue;
    std::string all;
    for (const std::string& line : lines) all += "\n  " + line;
    MNIST_THROW(ConfigError,
                "devices: rank 0 runs {} local workers but rank {} runs {}; every process must run "
                "the same number (replica index = rank x local workers + worker), so give every "
                "node the same devices.gpus / devices.cpu_workers:{}",
                counts[0], r, counts[r], all);
  }
  return lines;
}

namespace detail {
std::unique_ptr<ProcessGroup> make_single_process_group() {
  return std::make_unique<SingleProcessGroup>();
}
}  // namespace detail

}  // namespace mnist
