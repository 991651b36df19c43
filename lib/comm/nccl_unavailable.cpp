// Built only when NCCL is not (lib/CMakeLists.txt): the NCCL communicator factories throw a clear
// error instead of falling back silently to something slower or wrong.
#include "comm/gpu_communicators.hpp"
#include "core/error.hpp"

namespace mnist {

bool nccl_available() {
  return false;
}

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

}  // namespace mnist
