#include "train/communicators.hpp"

#include <algorithm>

#include "comm/gpu_communicators.hpp"
#include "comm/thread_communicator.hpp"
#include "core/error.hpp"

namespace mnist {

std::unique_ptr<Communicator> make_communicator(const DevicePlan& plan) {
  if (plan.kind == DeviceKind::cpu) return std::make_unique<ThreadCommunicator>(plan.cpu_workers);
  const std::vector<int>& gpus = plan.gpus;
  MNIST_CHECK(!gpus.empty(), "a CUDA device plan without GPUs");
  if (std::all_of(gpus.begin(), gpus.end(), [&](int g) { return g == gpus[0]; }))
    return make_device_communicator(gpus[0], static_cast<int>(gpus.size()));
  check_gpu_layout(gpus);  // what is left: all distinct
  return make_nccl_communicator(gpus);
}

}  // namespace mnist
