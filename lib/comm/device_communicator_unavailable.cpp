// Built only when the CUDA backend is not (lib/CMakeLists.txt): several workers on one GPU need
// CUDA, and a build without it says so.
#include "comm/gpu_communicators.hpp"
#include "core/error.hpp"

namespace mnist {

std::unique_ptr<Communicator> make_device_communicator(int gpu, int workers) {
  MNIST_THROW(RuntimeError,
              "{} workers on GPU {}: this mnist-train was built without CUDA (MNIST_CUDA=OFF or no "
              "toolkit at build time); set devices.backend: cpu",
              workers, gpu);
}

}  // namespace mnist
