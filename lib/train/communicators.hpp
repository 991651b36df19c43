#pragma once
// Which communicator a run's workers average through, from its device plan:
//   CPU workers                         -> ThreadCommunicator (shared host memory)
//   one GPU worker                      -> the device all-reduce with one worker (nothing to sum:
//                                          no NCCL set-up for a run that needs none)
//   distinct GPUs, one worker each      -> NCCL (a RuntimeError when built without NCCL)
//   several workers all on ONE GPU      -> the device all-reduce (NCCL refuses two ranks on a GPU)
//   anything else, e.g. [0, 0, 1]       -> ConfigError naming the layout: workers sharing a GPU and
//                                          workers on other GPUs would need both transports at once
// Build it before the Trainer (NCCL sets every rank up before the first collective) and keep it
// alive until the Trainer is destroyed.

#include <memory>

#include "comm/communicator.hpp"
#include "train/device_plan.hpp"

namespace mnist {

std::unique_ptr<Communicator> make_communicator(const DevicePlan& plan);

}  // namespace mnist
