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
  std::vector<int> sorted = gpus;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end())
    return make_nccl_communicator(gpus);
  std::string list;
  for (int g : gpus) list += (list.empty() ? "" : ", ") + std::to_string(g);
  MNIST_THROW(ConfigError,
              "devices.gpus: [{}] mixes workers sharing a GPU with workers on other GPUs; use "
              "distinct GPUs (one worker each, averaged with NCCL) or repeat ONE GPU (several "
              "workers on it, e.g. [0, 0])",
              list);
}

}  // namespace mnist
