#pragma once
// The one factory of the communicator a run's workers average through, from its device plan and,
// for a run of several processes (mpirun / srun), its process group. In one process:
//   CPU workers                         -> ThreadCommunicator (shared host memory)
//   one GPU worker                      -> the device all-reduce with one worker (nothing to sum:
//                                          no NCCL set-up for a run that needs none)
//   distinct GPUs, one worker each      -> NCCL (a RuntimeError when built without NCCL)
//   several workers all on ONE GPU      -> the device all-reduce (NCCL refuses two ranks on a GPU)
//   anything else, e.g. [0, 0, 1]       -> ConfigError naming the layout: workers sharing a GPU and
//                                          workers on other GPUs would need both transports at once
// Across processes: CPU workers sum within the process, then with MPI (the group's upper level);
// GPU workers join one NCCL communicator over every process's GPUs, whose id rank 0 broadcasts
// through the group.
// Build it before the Trainer (NCCL sets every rank up before the first collective); the Trainer
// and its workers share it.

#include <memory>

#include "comm/communicator.hpp"
#include "comm/process_group.hpp"
#include "train/device_plan.hpp"

namespace mnist {

// `group`: null or a group of one process for a single-process run.
std::unique_ptr<Communicator> make_communicator(const DevicePlan& plan,
                                                ProcessGroup* group = nullptr);

}  // namespace mnist
