#include "sweep/placement.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "sweep/spec.hpp"

namespace mnist {

namespace {
constexpr double kMiB = 1048576.0;
}  // namespace

std::string SweepSlot::describe() const {
  if (gpu)
    return fmt::format("GPU {} (CUDA_VISIBLE_DEVICES={})", gpu_ordinal, cuda_visible_devices);
  return fmt::format("cpu slot {} ({} thread{})", index, threads, threads == 1 ? "" : "s");
}

std::vector<std::string> SweepSlot::overrides() const {
  // Pinned by CUDA_VISIBLE_DEVICES, a point sees its one card as ordinal 0: "all" is that card.
  if (gpu) return {"devices.gpus=all"};
  return {fmt::format("devices.threads={}", threads)};
}

SweepPlacement place_on_cpu(int slots, int cpu_threads, const std::string& why) {
  if (slots < 1) MNIST_THROW(UsageError, "--slots {}: expected at least 1", slots);
  if (slots > cpu_threads)
    MNIST_THROW(UsageError,
                "--slots {}: this process may use {} CPU thread{} ({}); more points at once than "
                "threads would wait on each other at every step; use at most --slots {}",
                slots, cpu_threads, cpu_threads == 1 ? "" : "s", why, cpu_threads);
  SweepPlacement placement;
  const int each = cpu_threads / slots;
  for (int i = 0; i < slots; ++i) {
    SweepSlot slot;
    slot.index = i;
    slot.threads = each;
    placement.slots.push_back(slot);
  }
  placement.summary =
      fmt::format("{} CPU slot{} x {} thread{} ({} usable: {})", slots, slots == 1 ? "" : "s", each,
                  each == 1 ? "" : "s", cpu_threads, why);
  return placement;
}

std::vector<GpuInfo> select_gpus(const std::string& selection,
                                 const std::vector<GpuInfo>& visible) {
  if (visible.empty())
    MNIST_THROW(UsageError, "--gpus {}: no GPU is visible to this process", selection);
  if (selection == "all") return visible;
  if (selection.rfind("auto:", 0) == 0) {
    const std::string n = selection.substr(5);
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(n) < 1)
      MNIST_THROW(UsageError, "--gpus {}: auto:N needs a count N >= 1", selection);
    const std::size_t count = std::stoul(n);
    if (count > visible.size())
      MNIST_THROW(UsageError, "--gpus {}: only {} GPU{} visible", selection, visible.size(),
                  visible.size() == 1 ? " is" : "s are");
    std::vector<GpuInfo> by_free = visible;
    std::stable_sort(by_free.begin(), by_free.end(), [](const GpuInfo& a, const GpuInfo& b) {
      return a.free_bytes > b.free_bytes;
    });
    by_free.resize(count);
    std::sort(by_free.begin(), by_free.end(),
              [](const GpuInfo& a, const GpuInfo& b) { return a.ordinal < b.ordinal; });
    return by_free;
  }
  std::vector<GpuInfo> chosen;
  for (const std::string& part : split_top_level(selection)) {
    if (part.empty() || part.size() > 4 ||
        part.find_first_not_of("0123456789") != std::string::npos)
      MNIST_THROW(UsageError, "--gpus {}: expected all, auto:N or a list of ordinals such as 0,1",
                  selection);
    const int ordinal = std::stoi(part);
    const auto it = std::find_if(visible.begin(), visible.end(),
                                 [&](const GpuInfo& g) { return g.ordinal == ordinal; });
    if (it == visible.end())
      MNIST_THROW(UsageError, "--gpus {}: GPU {} is not visible ({} GPU{} visible: 0..{})",
                  selection, ordinal, visible.size(), visible.size() == 1 ? "" : "s",
                  visible.size() - 1);
    for (const GpuInfo& g : chosen)
      if (g.ordinal == ordinal)
        MNIST_THROW(UsageError,
                    "--gpus {}: GPU {} is listed twice (use --per-gpu K for K points at once on "
                    "a card)",
                    selection, ordinal);
    chosen.push_back(*it);
  }
  return chosen;
}

std::string child_visible_devices(int ordinal, const char* parent) {
  if (parent == nullptr) return std::to_string(ordinal);
  const std::vector<std::string> entries = split_top_level(parent);
  if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= entries.size())
    MNIST_THROW(RuntimeError, "GPU {} has no entry in this process's CUDA_VISIBLE_DEVICES={}",
                ordinal, parent);
  return entries[ordinal];
}

void check_gpu_fit(const GpuInfo& gpu, int per_gpu, uint64_t run_bytes) {
  if (per_gpu < 1) MNIST_THROW(UsageError, "--per-gpu {}: expected at least 1", per_gpu);
  const uint64_t need = run_bytes * static_cast<uint64_t>(per_gpu);
  if (need <= gpu.free_bytes) return;
  const uint64_t fits = run_bytes == 0 ? 0 : gpu.free_bytes / run_bytes;
  MNIST_THROW(UsageError,
              "--per-gpu {}: {} runs at once need about {:.0f} MiB on GPU {} ({}), which has "
              "{:.0f} MiB free ({:.0f} MiB per run: the run's memory estimate plus a CUDA "
              "context); {}",
              per_gpu, per_gpu, need / kMiB, gpu.ordinal, gpu.name.empty() ? "?" : gpu.name,
              gpu.free_bytes / kMiB, run_bytes / kMiB,
              fits >= 1 ? fmt::format("use at most --per-gpu {}", fits)
                        : std::string("not even one run fits: free the card or choose another"));
}

SweepPlacement place_on_gpus(const std::vector<GpuInfo>& gpus, int per_gpu, uint64_t run_bytes,
                             const char* parent_visible_devices) {
  SweepPlacement placement;
  for (const GpuInfo& g : gpus) check_gpu_fit(g, per_gpu, run_bytes);
  for (int k = 0; k < per_gpu; ++k)
    for (const GpuInfo& g : gpus) {
      SweepSlot slot;
      slot.index = static_cast<int>(placement.slots.size());
      slot.gpu = true;
      slot.gpu_ordinal = g.ordinal;
      slot.cuda_visible_devices = child_visible_devices(g.ordinal, parent_visible_devices);
      placement.slots.push_back(slot);
    }
  std::vector<int> ordinals;
  for (const GpuInfo& g : gpus) ordinals.push_back(g.ordinal);
  placement.summary =
      fmt::format("GPU{} [{}] x {} point{} at once each", gpus.size() == 1 ? "" : "s",
                  fmt::join(ordinals, ", "), per_gpu, per_gpu == 1 ? "" : "s");
  return placement;
}

uint64_t gpu_run_bytes(uint64_t replica_bytes, int replicas, uint64_t dataset_bytes) {
  const uint64_t n = static_cast<uint64_t>(std::max(replicas, 1));
  return replica_bytes * n + dataset_bytes * n + kCudaContextBytes;
}

}  // namespace mnist
