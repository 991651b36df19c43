#pragma once
// The GPUs this process can see. No CUDA types: CPU-only code includes this.
#include <cstddef>
#include <string>
#include <vector>

namespace mnist {

struct GpuInfo {
  int ordinal = 0;
  std::string name, pci_bus_id, uuid;
  int cc_major = 0, cc_minor = 0;
  std::size_t free_bytes = 0, total_bytes = 0;
};

// Empty when CUDA was not built, there is no driver, or no device (any error counts as none).
std::vector<GpuInfo> list_gpus();
// "driver 13.0, runtime 13.0", or why they are unknown.
std::string cuda_versions();

}  // namespace mnist
