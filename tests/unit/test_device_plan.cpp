// Device selection rules, tested with injected GPU lists (no GPU needed).
#include <catch2/catch.hpp>

#include <cstdlib>

#include "core/error.hpp"
#include "train/device_plan.hpp"

using namespace mnist;

namespace {
std::vector<GpuInfo> gpus(std::vector<std::size_t> free_gib) {
  std::vector<GpuInfo> list;
  for (std::size_t i = 0; i < free_gib.size(); ++i) {
    GpuInfo g;
    g.ordinal = static_cast<int>(i);
    g.name = "Test GPU";
    g.free_bytes = free_gib[i] << 30;
    g.total_bytes = std::size_t{80} << 30;
    list.push_back(g);
  }
  return list;
}
DevicesConfig config(BackendChoice backend, GpuSelection mode, std::vector<int> list = {},
                     int auto_count = 0) {
  DevicesConfig c;
  c.backend = backend;
  c.gpus_mode = mode;
  c.gpu_list = std::move(list);
  c.gpus_auto_count = auto_count;
  return c;
}
}  // namespace

TEST_CASE("auto uses every visible GPU, or the CPU with a note when there is none", "[devices]") {
  const DevicePlan two =
      plan_devices(config(BackendChoice::auto_select, GpuSelection::all), gpus({10, 20}));
  CHECK(two.kind == DeviceKind::cuda);
  CHECK(two.gpus == std::vector<int>{0, 1});
  CHECK(two.workers() == 2);
  DevicesConfig cpu = config(BackendChoice::auto_select, GpuSelection::all);
  cpu.cpu_workers = 3;
  const DevicePlan none = plan_devices(cpu, {}, "cudaGetDeviceCount: no driver");
  CHECK(none.kind == DeviceKind::cpu);
  CHECK(none.workers() == 3);
  CHECK(none.note.find("no GPU visible: cudaGetDeviceCount: no driver; training on the CPU, 3 "
                       "workers x ") == 0);
}

TEST_CASE("backend auto checks the engine once it has chosen cuda", "[devices]") {
  DevicesConfig c = config(BackendChoice::auto_select, GpuSelection::all);
  c.engine = Engine::blas;
  REQUIRE_THROWS_AS(plan_devices(c, gpus({10})), ConfigError);
  REQUIRE_THROWS_WITH(plan_devices(c, gpus({10})),
                      Catch::Contains("devices.engine: 'blas' is not a CUDA engine") &&
                          Catch::Contains("allowed: native, cublas, cudnn, fused"));
  for (const Engine engine : engines_of(BackendChoice::cuda)) {
    c.engine = engine;
    CHECK(plan_devices(c, gpus({10})).engine == engine);
  }
}

TEST_CASE("a GPU list falling back to the CPU keeps one replica per listed GPU", "[devices]") {
  // configs/two_gpu.yaml on a machine without a GPU: two CPU replicas of batch_per_device each,
  // so the global batch stays the config's 2 x 1000, not 1000.
  DevicesConfig two = config(BackendChoice::auto_select, GpuSelection::list, {0, 1});
  two.threads = 2;
  const DevicePlan plan = plan_devices(two, {}, "no driver");
  CHECK(plan.kind == DeviceKind::cpu);
  CHECK(plan.workers() == 2);
  CHECK(plan.threads_per_worker == 1);
  // The note and the plan's description use the same words (once they disagreed).
  CHECK(plan.describe().rfind("cpu, 2 workers x 1 thread, engine ", 0) == 0);
  CHECK(plan.note.find("training on the CPU, 2 workers x 1 thread (one per GPU in devices.gpus") !=
        std::string::npos);
  CHECK(plan.note.find("((") == std::string::npos);
  DevicesConfig auto3 = config(BackendChoice::auto_select, GpuSelection::auto_count, {}, 3);
  CHECK(plan_devices(auto3, {}, "no driver").workers() == 3);
  // backend cpu is taken literally: cpu_workers, whatever devices.gpus says.
  DevicesConfig cpu = config(BackendChoice::cpu, GpuSelection::list, {0, 1});
  CHECK(plan_devices(cpu, {}).workers() == 1);
  CHECK(plan_devices(cpu, {}).note.empty());
}

TEST_CASE("an explicit GPU list is checked against what is visible", "[devices]") {
  const DevicePlan p =
      plan_devices(config(BackendChoice::cuda, GpuSelection::list, {1, 0}), gpus({1, 1}));
  CHECK(p.gpus == std::vector<int>{1, 0});
  const DevicePlan shared =
      plan_devices(config(BackendChoice::cuda, GpuSelection::list, {0, 0}), gpus({1}));
  CHECK(shared.workers() == 2);  // two workers sharing one GPU
  // Sharing one GPU and spreading over several cannot be mixed (caught before any device work).
  REQUIRE_THROWS_WITH(
      plan_devices(config(BackendChoice::cuda, GpuSelection::list, {0, 0, 1}), gpus({1, 1})),
      Catch::Contains("devices.gpus: [0, 0, 1] mixes"));
  ::setenv("CUDA_VISIBLE_DEVICES", "2,3", 1);
  REQUIRE_THROWS_AS(
      plan_devices(config(BackendChoice::cuda, GpuSelection::list, {0, 2}), gpus({1, 1})),
      ConfigError);
  REQUIRE_THROWS_WITH(
      plan_devices(config(BackendChoice::cuda, GpuSelection::list, {0, 2}), gpus({1, 1})),
      Catch::Contains("devices.gpus[1]") && Catch::Contains("GPU 2 is not visible") &&
          Catch::Contains("2 GPUs are visible") && Catch::Contains("CUDA_VISIBLE_DEVICES=2,3"));
  ::unsetenv("CUDA_VISIBLE_DEVICES");
}

TEST_CASE("auto:N takes the GPUs with the most free memory and refuses too few", "[devices]") {
  const DevicePlan p = plan_devices(
      config(BackendChoice::auto_select, GpuSelection::auto_count, {}, 2), gpus({5, 70, 3, 40}));
  CHECK(p.gpus == std::vector<int>{1, 3});
  REQUIRE_THROWS_WITH(
      plan_devices(config(BackendChoice::cuda, GpuSelection::auto_count, {}, 3), gpus({5, 70})),
      Catch::Contains("auto:3") && Catch::Contains("2 visible"));
}

TEST_CASE("backend cuda with no GPU is an error that says why", "[devices]") {
  REQUIRE_THROWS_AS(
      plan_devices(config(BackendChoice::cuda, GpuSelection::all), {}, "no driver loaded"),
      RuntimeError);
  REQUIRE_THROWS_WITH(
      plan_devices(config(BackendChoice::cuda, GpuSelection::all), {}, "no driver loaded"),
      Catch::Contains("no driver loaded") && Catch::Contains("devices.backend"));
}

TEST_CASE("CPU threads are split between workers", "[devices]") {
  DevicesConfig c = config(BackendChoice::cpu, GpuSelection::all);
  c.cpu_workers = 2;
  c.threads = 8;
  const DevicePlan p = plan_devices(c, gpus({10}));  // backend cpu ignores visible GPUs
  CHECK(p.kind == DeviceKind::cpu);
  CHECK(p.threads_per_worker == 4);
  CHECK(p.describe() == "cpu, 2 workers x 4 threads, engine native");
  c.engine = Engine::cudnn;
  REQUIRE_THROWS_WITH(plan_devices(c, {}),
                      Catch::Contains("devices.engine") && Catch::Contains("allowed: native"));
  // The CPU engines of the build are accepted (blas only where OpenBLAS was found).
  for (const Engine engine : cpu_engines()) {
    c.engine = engine;
    CHECK(plan_devices(c, {}).engine == engine);
  }
}
