// Built only when the CUDA backend is not: a clear error instead of a silent CPU fallback.
#include "backend/backend.hpp"
#include "core/error.hpp"

namespace mnist {

std::unique_ptr<Backend> make_cuda_backend(int device_ordinal, const BackendOptions&) {
  MNIST_THROW(RuntimeError,
              "GPU {} requested, but this mnist-train was built without CUDA (MNIST_CUDA=OFF or no "
              "toolkit at build time); rebuild with -DMNIST_CUDA=ON or set devices.backend: cpu",
              device_ordinal);
}

}  // namespace mnist

#include "backend/cuda_devices.hpp"

namespace mnist {
std::vector<GpuInfo> list_gpus() { return {}; }
std::string cuda_versions() { return "built without CUDA"; }
}  // namespace mnist
