// Built only when the CUDA backend is not: a clear error instead of a silent CPU fallback, and a
// device query that answers "none, and why".
#include "backend/backend.hpp"
#include "backend/cuda_devices.hpp"
#include "core/error.hpp"

#include <cstdlib>

namespace mnist {

namespace {
constexpr const char* kNotBuilt =
    "this mnist-train was built without CUDA (MNIST_CUDA=OFF or no toolkit at build time)";
}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device_ordinal, const BackendOptions&) {
  MNIST_THROW(RuntimeError,
              "GPU {} requested, but {}; rebuild with -DMNIST_CUDA=ON or set devices.backend: cpu",
              device_ordinal, kNotBuilt);
}

int visible_gpu_count(std::string* why_none) {
  if (why_none) *why_none = kNotBuilt;
  return 0;
}

std::vector<GpuInfo> list_gpus() {
  return {};
}

std::string cuda_versions() {
  return "built without CUDA";
}

std::string cuda_visible_devices_description() {
  const char* value = std::getenv("CUDA_VISIBLE_DEVICES");
  return value ? fmt::format("CUDA_VISIBLE_DEVICES={}", value) : "CUDA_VISIBLE_DEVICES unset";
}

}  // namespace mnist
