#include "train/communicators.hpp"

#include <algorithm>

#include "comm/gpu_communicators.hpp"
#include "comm/thread_communicator.hpp"
#include "core/error.hpp"

namespace mnist {

std::unique_ptr<Communicator> make_communicator(const DevicePlan& plan, ProcessGroup* group) {
  const bool distributed = group && group->size() > 1;
  if (plan.kind == DeviceKind::cpu) {
    if (!distributed) return std::make_unique<ThreadCommunicator>(plan.cpu_workers);
    return std::make_unique<ThreadCommunicator>(plan.cpu_workers, group->upper_reduce(),
                                                group->size());
  }
  const std::vector<int>& gpus = plan.gpus;
  MNIST_CHECK(!gpus.empty(), "a CUDA device plan without GPUs");
  if (distributed) {
    NcclIdBytes id{};
    if (group->rank() == 0) id = make_nccl_id();
    group->broadcast(id.data(), id.size(), 0);
    const int workers = static_cast<int>(gpus.size());
    return make_nccl_communicator(gpus, id, group->rank() * workers, group->size() * workers);
  }
  if (std::all_of(gpus.begin(), gpus.end(), [&](int g) { return g == gpus[0]; }))
    return make_device_communicator(gpus[0], static_cast<int>(gpus.size()));
  check_gpu_layout(gpus);  // what is left: all distinct
  return make_nccl_communicator(gpus);
}

}  // namespace mnist
