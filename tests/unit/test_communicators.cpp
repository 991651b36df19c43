// make_communicator (the one factory, for one process or several) picks the transport, and the
// refusals a user reads, on any machine (the layouts refused here are refused before any device is
// touched).
#include <catch2/catch.hpp>

#include "backend/cuda_devices.hpp"
#include "comm/gpu_communicators.hpp"
#include "comm/process_group.hpp"
#include "core/error.hpp"
#include "train/communicators.hpp"

using namespace mnist;

TEST_CASE("CPU workers average through the thread communicator", "[comm][communicators]") {
  DevicePlan plan;
  plan.kind = DeviceKind::cpu;
  plan.cpu_workers = 3;
  const auto comm = make_communicator(plan);
  CHECK(comm->name() == "in-process sum over 3 workers");
  CHECK(comm->local_size() == 3);
  CHECK(comm->global_size() == 3);
}

TEST_CASE("workers sharing a GPU with workers on other GPUs are refused, naming the layout",
          "[comm][communicators]") {
  DevicePlan plan;
  plan.kind = DeviceKind::cuda;
  for (const std::vector<int>& gpus : {std::vector<int>{0, 0, 1}, std::vector<int>{1, 0, 1}}) {
    plan.gpus = gpus;
    std::string list;
    for (int g : gpus) list += (list.empty() ? "" : ", ") + std::to_string(g);
    REQUIRE_THROWS_AS(make_communicator(plan), ConfigError);
    REQUIRE_THROWS_WITH(make_communicator(plan), Catch::Contains("devices.gpus: [" + list + "]") &&
                                                     Catch::Contains("repeat ONE GPU"));
  }
}

TEST_CASE("distinct GPUs without NCCL or a GPU are a runtime error, not a silent fallback",
          "[comm][communicators]") {
  if (visible_gpu_count() > 0 && nccl_available()) {
    WARN("a GPU and NCCL are present: the refusal is not exercised here (gpu_tests cover NCCL)");
    return;
  }
  DevicePlan plan;
  plan.kind = DeviceKind::cuda;
  plan.gpus = {0, 1};
  try {
    make_communicator(plan);
    FAIL("make_communicator built a communicator for GPUs that cannot be used");
  } catch (const RuntimeError& e) {
    const std::string what = e.what();
    CAPTURE(what);
    // Without NCCL the message says so; with NCCL but no GPU, NCCL or CUDA names the failure.
    if (!nccl_available()) {
      CHECK(what.find("GPUs [0, 1]") != std::string::npos);
      CHECK(what.find("NCCL") != std::string::npos);
      CHECK(what.find("MNIST_NCCL") != std::string::npos);
    } else {
      CHECK((what.find("NCCL") != std::string::npos || what.find("CUDA") != std::string::npos));
    }
  }
}

namespace {
// Two processes as the communicator sees them: the upper level sums by doubling (as a second rank
// holding the same values would).
class TwoProcesses : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  void all_reduce_sum(float* data, std::size_t count) override {
    for (std::size_t i = 0; i < count; ++i) data[i] *= 2;
    ++reduces;
  }
  void broadcast(void*, std::size_t, int) override {}
  void barrier() override {}
  std::vector<std::string> all_gather_strings(const std::string& mine) override {
    return {mine, mine};
  }
  void abort(int) override {}
  int reduces = 0;
};
}  // namespace

TEST_CASE("across processes CPU workers sum in the process, then through the process group",
          "[comm][communicators]") {
  DevicePlan plan;
  plan.kind = DeviceKind::cpu;
  plan.cpu_workers = 1;
  TwoProcesses group;
  const auto comm = make_communicator(plan, &group);
  CHECK(comm->name() == "in-process sum over 1 worker, then MPI over 2 processes");
  CHECK(comm->local_size() == 1);
  CHECK(comm->global_size() == 2);
  auto backend = make_cpu_backend(BackendOptions{});
  std::vector<float> values = {1.0f, 2.5f};
  comm->all_reduce_sum(0, *backend, values.data(), values.size());
  CHECK(values == std::vector<float>{2.0f, 5.0f});
  CHECK(group.reduces == 1);
  // A group of one process is the single-process communicator.
  auto single = ProcessGroup::create(nullptr, nullptr, LaunchInfo{});
  plan.cpu_workers = 3;
  CHECK(make_communicator(plan, single.get())->name() == "in-process sum over 3 workers");
}
