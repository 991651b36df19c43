#include "train/device_plan.hpp"

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <thread>

#include "core/cpu_threads.hpp"
#include "core/error.hpp"

namespace mnist {

std::vector<GpuInfo> visible_gpus(const DevicesConfig& config, std::string* why_none) {
  if (config.backend == BackendChoice::cpu) return {};
  // Only auto:N needs free memory, which needs a context on every GPU; otherwise the count
  // suffices and no context is created on a GPU the run does not choose.
  if (config.gpus_mode == GpuSelection::auto_count) {
    std::vector<GpuInfo> gpus = list_gpus();
    if (gpus.empty()) visible_gpu_count(why_none);
    return gpus;
  }
  const int count = visible_gpu_count(why_none);
  std::vector<GpuInfo> gpus(count);
  for (int i = 0; i < count; ++i) gpus[i].ordinal = i;
  return gpus;
}

void check_gpu_layout(const std::vector<int>& gpus) {
  std::vector<int> sorted = gpus;
  std::sort(sorted.begin(), sorted.end());
  const bool all_same = sorted.empty() || sorted.front() == sorted.back();
  const bool all_distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  if (all_same || all_distinct) return;
  std::string list;
  for (int g : gpus) list += (list.empty() ? "" : ", ") + std::to_string(g);
  MNIST_THROW(ConfigError,
              "devices.gpus: [{}] mixes workers sharing a GPU with workers on other GPUs; use "
              "distinct GPUs (one worker each, averaged with NCCL) or repeat ONE GPU (several "
              "workers on it, e.g. [0, 0])",
              list);
}

DevicePlan plan_devices(const DevicesConfig& config, const std::vector<GpuInfo>& visible,
                        const std::string& why_none) {
  DevicePlan plan;
  plan.engine = config.engine;
  bool use_gpu = config.backend == BackendChoice::cuda;
  if (config.backend == BackendChoice::auto_select) use_gpu = !visible.empty();
  if (use_gpu) {
    if (visible.empty())
      MNIST_THROW(RuntimeError,
                  "devices.backend is cuda but no GPU can be used: {}; set devices.backend: cpu or "
                  "auto to train on the CPU",
                  why_none.empty()
                      ? fmt::format("none visible ({}; {})", cuda_visible_devices_description(),
                                    cuda_versions())
                      : why_none);
    plan.kind = DeviceKind::cuda;
    // With backend auto the config could not check the engine; now the backend is known. (An
    // engine this build lacks, cudnn without cuDNN, is refused by the backend, which says why.)
    const std::vector<Engine> cuda = engines_of(BackendChoice::cuda);
    if (std::find(cuda.begin(), cuda.end(), config.engine) == cuda.end()) {
      MNIST_THROW(ConfigError,
                  "devices.engine: '{}' is not a CUDA engine, and backend auto chose cuda (GPUs "
                  "are visible); allowed: {}, or set devices.backend: cpu",
                  to_string(config.engine), engine_names(cuda));
    }
    const int count = static_cast<int>(visible.size());
    if (config.gpus_mode == GpuSelection::all) {
      plan.gpus.resize(count);
      std::iota(plan.gpus.begin(), plan.gpus.end(), 0);
    } else if (config.gpus_mode == GpuSelection::auto_count) {
      if (config.gpus_auto_count > count)
        MNIST_THROW(ConfigError, "devices.gpus: auto:{} asks for {} GPUs but {} visible ({})",
                    config.gpus_auto_count, config.gpus_auto_count, count,
                    cuda_visible_devices_description());
      std::vector<int> order(count);
      std::iota(order.begin(), order.end(), 0);
      // Most free memory first: on a shared box that is the least used card.
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return visible[a].free_bytes > visible[b].free_bytes; });
      plan.gpus.assign(order.begin(), order.begin() + config.gpus_auto_count);
    } else {
      for (std::size_t i = 0; i < config.gpu_list.size(); ++i) {
        const int g = config.gpu_list[i];
        if (g < 0 || g >= count)
          MNIST_THROW(
              ConfigError,
              "devices.gpus[{}]: GPU {} is not visible: {} GPU{} visible (ordinals 0-{}), {}", i, g,
              count, count == 1 ? " is" : "s are", count - 1, cuda_visible_devices_description());
      }
      plan.gpus = config.gpu_list;
      check_gpu_layout(plan.gpus);
    }
    return plan;
  }
  plan.kind = DeviceKind::cpu;
  plan.cpu_workers = config.cpu_workers;
  // A GPU experiment falling back to the CPU keeps its meaning: one CPU replica per GPU it lists,
  // so the global batch (and with it the trajectory) is the one the config describes.
  int listed_gpus = 0;
  if (config.backend == BackendChoice::auto_select) {
    if (config.gpus_mode == GpuSelection::list)
      listed_gpus = static_cast<int>(config.gpu_list.size());
    if (config.gpus_mode == GpuSelection::auto_count) listed_gpus = config.gpus_auto_count;
    if (listed_gpus > 0) plan.cpu_workers = listed_gpus;
  }
  // 0: what the process may use (its affinity mask, OMP_NUM_THREADS), not the machine's cores,
  // which on a shared box or under a Slurm cpuset oversubscribes the CPUs it was given.
  const int threads = config.threads > 0 ? config.threads : usable_cpu_threads().count;
  plan.threads_per_worker = std::max(1, threads / plan.cpu_workers);
  const std::vector<Engine> engines = cpu_engines();
  if (std::find(engines.begin(), engines.end(), config.engine) == engines.end()) {
    MNIST_THROW(ConfigError,
                "devices.engine: '{}' is not a CPU engine of this build; allowed: {}{}",
                to_string(config.engine), engine_names(engines),
                config.engine == Engine::blas ? " (built without OpenBLAS)"
                                              : " (it needs the CUDA backend)");
  }
  if (config.backend == BackendChoice::auto_select)
    plan.note = fmt::format(
        "no GPU visible: {}; training on the CPU, {}{}",
        why_none.empty() ? cuda_visible_devices_description() : why_none, plan.describe_workers(),
        listed_gpus > 0 ? fmt::format(" (one per GPU in devices.gpus, so the global batch is the "
                                      "config's)")
                        : "");
  return plan;
}

BackendFactory DevicePlan::factory() const {
  const DevicePlan plan = *this;
  return [plan](int worker) -> std::unique_ptr<Backend> {
    BackendOptions options;
    options.worker_index = worker;
    options.threads = plan.threads_per_worker;
    options.engine = plan.engine;
    if (plan.kind == DeviceKind::cuda) return make_cuda_backend(plan.gpus.at(worker), options);
    return make_cpu_backend(options);
  };
}

std::string DevicePlan::describe_workers() const {
  return fmt::format("{} worker{} x {} thread{}", cpu_workers, cpu_workers == 1 ? "" : "s",
                     threads_per_worker, threads_per_worker == 1 ? "" : "s");
}

std::string DevicePlan::describe() const {
  if (kind == DeviceKind::cpu)
    return fmt::format("cpu, {}, engine {}", describe_workers(), to_string(engine));
  std::string list;
  for (int g : gpus) list += (list.empty() ? "" : ", ") + std::to_string(g);
  return fmt::format("cuda, GPUs [{}], engine {}", list, to_string(engine));
}

DevicePlan plan_devices_elsewhere(const DevicesConfig& config, const std::string& why_none) {
  DevicePlan plan;
  plan.kind = DeviceKind::cuda;
  plan.engine = config.engine;  // a CUDA engine: the config's reader checks it for backend cuda
  std::string assumed;
  if (config.gpus_mode == GpuSelection::list) {
    plan.gpus = config.gpu_list;
    check_gpu_layout(plan.gpus);
  } else {
    const int count = config.gpus_mode == GpuSelection::auto_count ? config.gpus_auto_count : 1;
    plan.gpus.resize(count);
    std::iota(plan.gpus.begin(), plan.gpus.end(), 0);
    assumed = config.gpus_mode == GpuSelection::all
                  ? "; devices.gpus is all: one GPU assumed, the node decides how many"
                  : "";
  }
  plan.note =
      fmt::format("not checked against GPUs: {}; planned as a node with them would plan it{}",
                  why_none.empty() ? cuda_visible_devices_description() : why_none, assumed);
  return plan;
}

std::string describe_visible_gpus() {
  const std::vector<GpuInfo> gpus = list_gpus();
  std::string out = fmt::format("{}; {}\n", cuda_visible_devices_description(), cuda_versions());
  if (gpus.empty()) {
    std::string why;
    visible_gpu_count(&why);
    return out + "no GPU is visible to this process" + (why.empty() ? "" : ": " + why) + "\n";
  }
  for (const GpuInfo& g : gpus) {
    std::string peers;
    for (int p : g.peers) peers += (peers.empty() ? "" : ",") + std::to_string(p);
    out += fmt::format(
        "gpu{}: {} (sm_{}{}), PCI {}, {}, memory {:.1f} / {:.1f} GiB free, peer access: {}\n",
        g.ordinal, g.name, g.cc_major, g.cc_minor, g.pci_bus_id, g.uuid,
        g.free_bytes / 1073741824.0, g.total_bytes / 1073741824.0,
        peers.empty() ? "none" : "gpu " + peers);
  }
  return out;
}

}  // namespace mnist
