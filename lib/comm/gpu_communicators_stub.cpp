// The GPU communicator factories for builds that lack their part: a clear error instead of a
// silent fallback. Compiled always (lib/CMakeLists.txt globs comm/*.cpp into mnist_core); each
// half switches itself off when the real implementation is built.
#include "build_info.hpp"
#include "comm/gpu_communicators.hpp"
#include "core/error.hpp"

namespace mnist {

bool nccl_available() {
  return MNIST_HAVE_NCCL != 0;
}

#if !MNIST_HAVE_NCCL
namespace {
[[noreturn]] void throw_no_nccl(const std::vector<int>& gpus) {
  std::string list;
  for (int g : gpus) list += (list.empty() ? "" : ", ") + std::to_string(g);
  MNIST_THROW(RuntimeError,
              "GPUs [{}]: averaging gradients between distinct GPUs needs NCCL, but this "
              "mnist-train was built without it (MNIST_NCCL=OFF, or nccl.h/libnccl not found at "
              "build time; see `mnist-train --version`); train on one GPU or rebuild with "
              "-DMNIST_NCCL=ON",
              list);
}
}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<int>& gpus) {
  throw_no_nccl(gpus);
}

NcclIdBytes make_nccl_id() {
  throw_no_nccl({});
}

std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<int>& gpus,
                                                     const NcclIdBytes&, int, int) {
  throw_no_nccl(gpus);
}
#endif

#if !MNIST_HAVE_CUDA
std::unique_ptr<Communicator> make_device_communicator(int gpu, int workers) {
  MNIST_THROW(RuntimeError,
              "{} workers on GPU {}: this mnist-train was built without CUDA (MNIST_CUDA=OFF or no "
              "toolkit at build time); set devices.backend: cpu",
              workers, gpu);
}
#endif

}  // namespace mnist
