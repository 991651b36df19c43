// Placeholder until the CUDA backend lands: the CUDA target must exist so CI proves it compiles.
#include "backend/backend.hpp"
#include "core/error.hpp"

namespace mnist {

std::unique_ptr<Backend> make_cuda_backend(int device_ordinal, const BackendOptions&) {
  MNIST_THROW(RuntimeError, "GPU {}: the CUDA backend is not implemented yet", device_ordinal);
}

}  // namespace mnist

#include "backend/cuda_devices.hpp"

namespace mnist {
std::vector<GpuInfo> list_gpus() { return {}; }
std::string cuda_versions() { return "CUDA backend not implemented yet"; }
}  // namespace mnist
