// GPU discovery for the CLI, config validation and tests (declared in backend/cuda_devices.hpp).
#include "backend/cuda_devices.hpp"

#include <cuda_runtime.h>

#include <cstdlib>

#include <fmt/format.h>

namespace mnist {
namespace {

std::string version_text(int v) {
  return v ? fmt::format("{}.{}", v / 1000, (v % 1000) / 10) : "none";
}

std::string uuid_text(const cudaUUID_t& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += fmt::format("{:02x}", b[i]);
  }
  return out;
}

}  // namespace

std::string cuda_visible_devices_description() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  return value ? fmt::format("CUDA_VISIBLE_DEVICES={}", value) : "CUDA_VISIBLE_DEVICES unset";
}

std::string cuda_versions() {
  int driver = 0, runtime = 0;
  // Without a driver both calls fail or report 0; "none" is then the honest answer.
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  cudaGetLastError();
  return fmt::format("CUDA driver {}, runtime {}", version_text(driver), version_text(runtime));
}

int visible_gpu_count(std::string* why_none) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear it: callers go on to use the CPU backend
    count = 0;           // without a driver the runtime may leave `count` untouched
  }
  if (count == 0 && why_none) {
    // One flat clause list: callers put it after their own "no GPU visible: ".
    *why_none = fmt::format("{}; {}; {}",
                            status != cudaSuccess
                                ? fmt::format("cudaGetDeviceCount: {}: {}",
                                              cudaGetErrorName(status), cudaGetErrorString(status))
                                : std::string("cudaGetDeviceCount returned 0"),
                            cuda_versions(), cuda_visible_devices_description());
  }
  return count;
}

std::vector<GpuInfo> list_gpus() {
  std::vector<GpuInfo> gpus;
  const int count = visible_gpu_count();
  int previous = 0;
  const bool had_previous = cudaGetDevice(&previous) == cudaSuccess;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    GpuInfo info;
    info.ordinal = ordinal;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess) {
      info.name = prop.name;
      info.uuid = uuid_text(prop.uuid);
      info.cc_major = prop.major;
      info.cc_minor = prop.minor;
      info.total_bytes = prop.totalGlobalMem;
    }
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal) == cudaSuccess) info.pci_bus_id = bus;
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaSetDevice(ordinal) == cudaSuccess &&
        cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      info.free_bytes = free_bytes;
      info.total_bytes = total_bytes;
    }
    // Which other GPUs this one can read and write directly (NVLink or PCIe P2P): what NCCL's
    // ring can use without staging through host memory.
    for (int other = 0; other < count; ++other) {
      int can = 0;
      if (other != ordinal && cudaDeviceCanAccessPeer(&can, ordinal, other) == cudaSuccess && can)
        info.peers.push_back(other);
    }
    cudaGetLastError();  // a GPU that cannot be queried is still listed, with what is known
    gpus.push_back(std::move(info));
  }
  if (had_previous && count > 0) cudaSetDevice(previous);
  return gpus;
}

}  // namespace mnist
