#pragma once
// Where a sweep's points run: slots, each running one point at a time. On GPUs a slot is one card
// (K slots per card with --per-gpu K), its process pinned with CUDA_VISIBLE_DEVICES as people pin
// by hand; on the CPU the usable cores are split between the slots (devices.threads), so the box
// is full but not oversubscribed. Pure arithmetic over what is visible, so the rules are tested on
// machines without a GPU (the free memory is a parameter).

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda_devices.hpp"

namespace mnist {

struct SweepSlot {
  int index = 0;
  bool gpu = false;
  int gpu_ordinal = -1;              // as this process numbers it
  std::string cuda_visible_devices;  // the child's CUDA_VISIBLE_DEVICES (gpu slots)
  int threads = 0;                   // the child's devices.threads (CPU slots)
  // "cpu slot 1 (1 thread)" or "GPU 0 (CUDA_VISIBLE_DEVICES=2), slot 1 of 2"
  std::string describe() const;
  std::vector<std::string> overrides() const;  // the --set texts a point on this slot gets
};

struct SweepPlacement {
  std::vector<SweepSlot> slots;
  std::string summary;  // "2 CPU slots x 1 thread (2 usable: affinity mask)"
};

// `slots` concurrent points sharing `cpu_threads` threads: each gets cpu_threads / slots (at
// least 1). More slots than threads is refused (UsageError): the points would wait on each other
// at every barrier. `why` says what set the thread count ("affinity mask").
SweepPlacement place_on_cpu(int slots, int cpu_threads, const std::string& why);

// The GPUs `selection` names among `visible`: "all", a list "0,2" (ordinals as this process sees
// them) or "auto:N" (the N with the most free memory). Throws UsageError naming --gpus for an
// ordinal that is not visible, a malformed selection, or auto:N beyond what is visible.
std::vector<GpuInfo> select_gpus(const std::string& selection, const std::vector<GpuInfo>& visible);

// The child's CUDA_VISIBLE_DEVICES for this process's ordinal `ordinal`: the ordinal-th entry of
// this process's own CUDA_VISIBLE_DEVICES (`parent`, nullptr when unset), so a sweep started
// under CUDA_VISIBLE_DEVICES=2,3 pins its points to 2 and 3, not 0 and 1.
std::string child_visible_devices(int ordinal, const char* parent);

// Throws UsageError when `per_gpu` runs of `run_bytes` each do not fit `gpu`'s free memory,
// naming the card, both figures and the largest --per-gpu that fits.
void check_gpu_fit(const GpuInfo& gpu, int per_gpu, uint64_t run_bytes);

// `per_gpu` slots on each GPU of `gpus` (each checked with check_gpu_fit), in the order card 0
// slot 0, card 1 slot 0, ..., so the first points spread over the cards.
SweepPlacement place_on_gpus(const std::vector<GpuInfo>& gpus, int per_gpu, uint64_t run_bytes,
                             const char* parent_visible_devices);

// The device memory one run takes, from the run's own estimate (train/run_memory.hpp:
// `replica_bytes` for each of its `replicas`) plus the dataset each replica keeps on its device
// (`dataset_bytes`) plus what a CUDA context with cuBLAS and cuDNN loaded holds
// (kCudaContextBytes: an assumption, not a measurement; a context with those libraries loaded
// holds a few hundred MiB, more on newer cards).
inline constexpr uint64_t kCudaContextBytes = uint64_t{512} << 20;
uint64_t gpu_run_bytes(uint64_t replica_bytes, int replicas, uint64_t dataset_bytes);

}  // namespace mnist
