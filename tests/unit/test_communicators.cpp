// make_communicator's choice of transport, and the refusals a user reads, on any machine (the
// layouts refused here are refused before any device is touched).
#include <catch2/catch.hpp>

#include "backend/cuda_devices.hpp"
#include "comm/gpu_communicators.hpp"
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
