#pragma once
// Which devices a run uses: resolves devices.backend / gpus / cpu_workers against what is visible.
// The GPU list is a parameter, so the rules are tested on machines without a GPU.

#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda_devices.hpp"
#include "config/experiment.hpp"
#include "train/trainer.hpp"

namespace mnist {

struct DevicePlan {
  DeviceKind kind = DeviceKind::cpu;
  std::vector<int> gpus;  // CUDA ordinals, one per worker (repeats allowed: workers sharing a GPU)
  int cpu_workers = 1;
  int threads_per_worker = 1;  // CPU backend
  Engine engine = Engine::native;
  std::string note;  // one line for the log when the choice deserves explaining

  int workers() const {
    return kind == DeviceKind::cuda ? static_cast<int>(gpus.size()) : cpu_workers;
  }
  BackendFactory factory() const;
  // "cpu, 2 workers x 1 thread, engine native" or "cuda, GPUs [0, 1], engine native": the one
  // wording of the plan, in --dry-run, the start lines and bench.
  std::string describe() const;
  std::string describe_workers() const;  // CPU: "2 workers x 1 thread"
};

// Throws ConfigError (a GPU that is not visible, auto:N with fewer than N) or RuntimeError
// (backend cuda with no usable GPU), naming CUDA_VISIBLE_DEVICES.
// Workers either all share one GPU or each have their own: a mix would need two transports at once
// (NCCL refuses two ranks on one GPU). Throws ConfigError naming the layout.
void check_gpu_layout(const std::vector<int>& gpus);

// `why_none`: why no GPU is visible (for the messages), when known.
DevicePlan plan_devices(const DevicesConfig& config, const std::vector<GpuInfo>& visible,
                        const std::string& why_none = "");

// The plan of backend cuda as a node with the config's GPUs would make it, on a machine that has
// none (a login node's --dry-run of a batch job): the GPUs devices.gpus lists, N for auto:N, one
// for "all" (the note says which were assumed and why none was checked). The config's other rules
// (the layout; a CUDA engine, which the config's reader checks) hold as on a GPU node. For
// devices.backend cuda only.
DevicePlan plan_devices_elsewhere(const DevicesConfig& config, const std::string& why_none);

// The GPUs this process can see for `config` (empty without CUDA, a driver, or a device, and for
// backend cpu). Only gpus: auto:N reads free memory (creating a context on each GPU); otherwise
// entries carry just their ordinal. `why_none` receives the reason when none is visible.
std::vector<GpuInfo> visible_gpus(const DevicesConfig& config, std::string* why_none);
// `mnist-train devices`: the GPU table, or why there is none.
std::string describe_visible_gpus();

}  // namespace mnist
