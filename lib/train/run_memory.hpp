#pragma once
// What a run's replicas need before any of it is allocated: the batch tensors against the 32-bit
// indexing limit of the kernels, and the host memory of the replicas that live in host memory (CPU
// workers) against what the machine has available. Refusing here, with the key that makes the run
// large, replaces a std::bad_alloc (or an index overflow) in the middle of the set-up.

#include <cstdint>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "core/host_memory.hpp"
#include "model/model.hpp"

namespace mnist {

// One share of a run's memory and the config key (or option) that sets its size.
struct MemoryTerm {
  std::string key;  // "train.batch_per_device", "--batch", "model.layers[3].dense"
  uint64_t bytes = 0;
};

// The memory one replica of `model` holds for batches of up to `batch` samples: a lower bound
// (parameters, gradients and both optimizer moments; the input batch, the two widest gradient
// buffers and the logits' gradient), split into the part the batch sets (`batch_key`) and the
// part the largest parameter tensor's layer sets. Throws ConfigError naming `batch_key` when one
// batch tensor would hold more than kMaxTensorValues values.
std::vector<MemoryTerm> replica_memory(const Model& model, int64_t batch,
                                       const std::string& batch_key);

// Throws ConfigError "<what> needs N MiB of host memory; M MiB are available" naming the key of
// the largest term when the terms (`copies` times, one per replica in host memory) add up to more
// than `available_bytes`.
void check_host_memory(const std::vector<MemoryTerm>& terms, int64_t copies,
                       uint64_t available_bytes, const std::string& what);

struct DevicePlan;

// The checks above for a training run of `experiment` on `devices` in each of `processes`
// processes: the per-replica batch (the larger of the training slice and train.eval_batch) against
// the tensor limit, and, for CPU workers, their replicas and their copies of the dataset
// (`dataset_bytes` of pixels and labels; 0 before it is read) against the host memory available.
void check_training_memory(const Experiment& experiment, const Model& model,
                           const DevicePlan& devices, int processes, uint64_t dataset_bytes);

}  // namespace mnist
