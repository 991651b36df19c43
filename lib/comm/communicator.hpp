#pragma once
// How replicas agree: one interface, several transports.
//
// Every local worker thread calls the collective with its own buffer (a device pointer of its own
// backend); the call returns when every replica's buffer holds the element-wise SUM over all
// replicas (all local workers, and all processes when distributed). Callers pre-scale what they
// contribute (gradients by 1/global batch), so sums are exact weights by sample count even when
// slices differ.
//
// Implementations: ThreadCommunicator (CPU workers in one process, shared memory),
// NCCL (GPUs), and an MPI layer between processes.

#include <cstddef>
#include <string>

#include "backend/backend.hpp"
#include "core/error.hpp"

namespace mnist {

// Thrown inside a worker blocked in a collective when another worker failed (the run is aborting).
class AbortedError : public RuntimeError {
  using RuntimeError::RuntimeError;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string name() const = 0;
  virtual int local_size() const = 0;   // workers in this process
  virtual int global_size() const = 0;  // replicas in the whole run
  // Collective over all replicas: data[0, count) becomes the sum. Must be called by every local
  // worker with the same count, in the same order of collectives.
  virtual void all_reduce_sum(int local_rank, Backend& backend, float* data, std::size_t count) = 0;
  // Wakes every worker blocked in a collective with AbortedError; later calls throw at once.
  virtual void abort() = 0;
};

}  // namespace mnist
