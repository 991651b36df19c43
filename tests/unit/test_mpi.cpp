// The process group without a launcher, and how the launcher's environment is read. Runs of real
// processes under mpirun are in tests/mpi/mpirun_matches_threads.sh.
#include <catch2/catch.hpp>

#include <map>
#include <thread>

#include "backend/backend.hpp"
#include "build_info.hpp"
#include "comm/process_group.hpp"
#include "comm/thread_communicator.hpp"
#include "config/experiment.hpp"
#include "core/error.hpp"

using namespace mnist;
using Catch::Matchers::Contains;

namespace {
// An environment holding exactly `vars`.
EnvLookup fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}
}  // namespace

TEST_CASE("no launcher variables: not launched, one process", "[mpi]") {
  const LaunchInfo launch =
      detect_launch(fake_env({{"PATH", "/usr/bin"}, {"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}}));
  // SLURM_NTASKS + SLURM_PROCID without a job step is an sbatch script running the tool directly.
  CHECK_FALSE(launch.launched());
  CHECK(launch.size == 1);
  CHECK(launch.rank == 0);
}

TEST_CASE("each launcher's size and rank variables are recognised", "[mpi]") {
  LaunchInfo ompi = detect_launch(
      fake_env({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"PMIX_RANK", "3"}}));
  CHECK(ompi.launched());
  CHECK(ompi.size == 4);
  CHECK(ompi.rank == 3);
  CHECK_THAT(ompi.launcher, Contains("OMPI_COMM_WORLD_SIZE=4"));

  LaunchInfo pmi = detect_launch(fake_env({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}}));
  CHECK(pmi.size == 2);
  CHECK(pmi.rank == 1);

  LaunchInfo srun = detect_launch(
      fake_env({{"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}}));
  CHECK(srun.size == 8);  // the step's task count, not the allocation's
  CHECK(srun.rank == 5);
  CHECK_THAT(srun.launcher, Contains("srun"));

  LaunchInfo pmix = detect_launch(fake_env({{"PMIX_RANK", "2"}}));
  CHECK(pmix.launched());
  CHECK(pmix.size == -1);  // PMIx alone does not say the size
  CHECK(pmix.rank == 2);

  LaunchInfo one =
      detect_launch(fake_env({{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}}));
  CHECK(one.launched());
  CHECK(one.size == 1);
}

TEST_CASE("malformed launcher variables are errors naming the variable and value", "[mpi]") {
  CHECK_THROWS_WITH(detect_launch(fake_env({{"OMPI_COMM_WORLD_SIZE", "two"}})),
                    Contains("OMPI_COMM_WORLD_SIZE='two'") && Contains("whole number >= 1"));
  CHECK_THROWS_WITH(detect_launch(fake_env({{"PMI_SIZE", "0"}, {"PMI_RANK", "0"}})),
                    Contains("PMI_SIZE='0'"));
  CHECK_THROWS_WITH(detect_launch(fake_env({{"PMI_SIZE", "2"}, {"PMI_RANK", "-1"}})),
                    Contains("PMI_RANK='-1'") && Contains(">= 0"));
  CHECK_THROWS_WITH(detect_launch(fake_env({{"PMI_SIZE", "2"}, {"PMI_RANK", "1x"}})),
                    Contains("PMI_RANK='1x'"));
  CHECK_THROWS_WITH(detect_launch(fake_env({{"OMPI_COMM_WORLD_SIZE", "99999999999"}})),
                    Contains("99999999999"));
  CHECK_THROWS_WITH(detect_launch(fake_env({{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "2"}})),
                    Contains("SLURM_PROCID=2 is not below SLURM_STEP_NUM_TASKS=2"));
}

TEST_CASE("a single-process group's collectives are the identity and make no MPI call", "[mpi]") {
  auto group = ProcessGroup::create(nullptr, nullptr, LaunchInfo{});
  REQUIRE(group);
  CHECK(group->rank() == 0);
  CHECK(group->size() == 1);
  CHECK(group->local_rank() == 0);
  CHECK(group->local_size() == 1);
  CHECK_FALSE(group->host().empty());
  CHECK(group->label().empty());       // single-process messages carry no rank prefix
  CHECK_FALSE(group->upper_reduce());  // no extra barrier in the thread all-reduce

  std::vector<float> data = {1.5f, -2.0f, 0.0f, 3.25f};
  const std::vector<float> before = data;
  group->all_reduce_sum(data.data(), data.size());
  CHECK(data == before);
  int value = 42;
  group->broadcast(&value, sizeof(value), 0);
  CHECK(value == 42);
  CHECK_THROWS_WITH(group->broadcast(&value, sizeof(value), 1), Contains("root 1"));
  group->barrier();
  CHECK(group->all_gather_strings("only me") == std::vector<std::string>{"only me"});
  group->abort(3);  // returns in a single process: the caller exits with the code itself

  const std::vector<std::string> map = agree_on_layout(*group, 2, "cpu x2");
  REQUIRE(map.size() == 1);
  CHECK_THAT(map[0],
             Contains("rank 0/1") && Contains(group->host()) && Contains("2 workers: cpu x2"));
}

TEST_CASE("the thread all-reduce with a single-process group sums like the threads alone",
          "[mpi]") {
  auto group = ProcessGroup::create(nullptr, nullptr, LaunchInfo{});
  ThreadCommunicator comm(2, group->upper_reduce(), group->size());
  CHECK(comm.global_size() == 2);
  std::vector<std::vector<float>> buffers = {{1, 2, 3}, {10, 20, 30}};
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k)
    threads.emplace_back([&, k] {
      auto be = make_cpu_backend(BackendOptions{k, 1, Engine::native});
      comm.all_reduce_sum(k, *be, buffers[k].data(), buffers[k].size());
    });
  for (auto& t : threads) t.join();
  CHECK(buffers[0] == std::vector<float>{11, 22, 33});
  CHECK(buffers[1] == std::vector<float>{11, 22, 33});
}

// With MPI built, create() on a launch would initialise MPI inside the test binary; the mpirun test
// covers that build.
#if !MNIST_HAVE_MPI
TEST_CASE("without MPI, a launcher of one process runs as a single rank", "[mpi]") {
  LaunchInfo launch;
  launch.launcher = "Open MPI mpirun (OMPI_COMM_WORLD_SIZE=1)";
  auto group = ProcessGroup::create(nullptr, nullptr, launch);
  CHECK(group->size() == 1);
}
#endif

TEST_CASE("a multi-process launch without MPI is refused with the count and launcher", "[mpi]") {
  LaunchInfo launch;
  launch.launcher = "Open MPI mpirun (OMPI_COMM_WORLD_SIZE=3)";
  launch.size = 3;
  launch.rank = 1;
  const std::string message = without_mpi_message(launch);  // checked in every build
  CHECK_THAT(message, Contains("built without MPI") && Contains("3 processes") &&
                          Contains("each train alone") && Contains("rank 1") &&
                          Contains("OMPI_COMM_WORLD_SIZE=3"));
#if !MNIST_HAVE_MPI
  CHECK_THROWS_AS(ProcessGroup::create(nullptr, nullptr, launch), RuntimeError);
  CHECK_THROWS_WITH(ProcessGroup::create(nullptr, nullptr, launch), message);
  LaunchInfo pmix;  // size unknown, but a rank above 0 proves there are several
  pmix.launcher = "a PMIx launcher (PMIX_RANK=1)";
  pmix.size = -1;
  pmix.rank = 1;
  CHECK_THROWS_WITH(ProcessGroup::create(nullptr, nullptr, pmix), Contains("several processes"));
#endif
}

TEST_CASE("an MPI that sees fewer processes than the launcher started is named", "[mpi]") {
  LaunchInfo launch;
  launch.launcher = "a PMI launcher (PMI_SIZE=2)";
  launch.size = 2;
  CHECK_NOTHROW(check_mpi_matches_launch(launch, 2, "Open MPI v4.1.4"));
  CHECK_THROWS_WITH(check_mpi_matches_launch(launch, 1, "Open MPI v4.1.4"),
                    Contains("started 2 processes but MPI sees a job of 1") &&
                        Contains("Open MPI v4.1.4") && Contains("train alone"));
  launch.size = -1;  // unknown size: nothing to compare
  CHECK_NOTHROW(check_mpi_matches_launch(launch, 4, "Open MPI v4.1.4"));
}
