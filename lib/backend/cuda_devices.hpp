#pragma once
// What GPUs this process can see, without CUDA types, so the CLI (`mnist-train devices`), the
// config validation and the tests can ask from plain C++. Built from
// lib/backend/cuda/cuda_devices.cu, or from lib/backend/cuda_unavailable.cpp when CUDA is not built
// (then: no GPUs, and why).

#include <cstddef>
#include <string>
#include <vector>

namespace mnist {

struct GpuInfo {
  int ordinal = 0;         // as CUDA numbers it under the current CUDA_VISIBLE_DEVICES
  std::string name;        // "NVIDIA H200"
  std::string pci_bus_id;  // "0000:19:00.0"
  std::string uuid;        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  int cc_major = 0, cc_minor = 0;
  std::size_t free_bytes = 0, total_bytes = 0;
  std::vector<int> peers;  // ordinals this GPU can access peer-to-peer
};

// Number of GPUs visible to CUDA. Any error of cudaGetDeviceCount (no driver, no device) counts as
// zero; then, when `why_none` is not nullptr, it receives a sentence saying why, with the driver
// and runtime versions and CUDA_VISIBLE_DEVICES. Creates no CUDA context.
int visible_gpu_count(std::string* why_none = nullptr);

// Every visible GPU. Reading free memory needs a context, so this creates the primary context on
// each visible GPU (a few hundred MB each): call it from the CLI's `devices` command and GPU
// selection, not from a worker. Empty when none is visible. Never throws for "no GPU".
std::vector<GpuInfo> list_gpus();

// "CUDA driver 13.0, runtime 13.0" (or why there is none).
std::string cuda_versions();

// "CUDA_VISIBLE_DEVICES=0,1" or "CUDA_VISIBLE_DEVICES unset", for messages.
std::string cuda_visible_devices_description();

}  // namespace mnist
