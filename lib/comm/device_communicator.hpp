#pragma once
// All-reduce between worker threads whose CUDA backends share ONE GPU (devices.gpus: [0, 0, ...]).
// NCCL refuses two ranks on one device, and a round trip through host memory would cost more than
// the step; instead every buffer is device memory of the same GPU, so one kernel can read them all.
//
// One call, for worker r (W workers, buffers b_0 .. b_{W-1} of `count` floats):
//   1. publish b_r and record event ready_r on r's stream (b_r's gradients are queued before it);
//   2. host barrier: every buffer published, every ready event recorded;
//   3. r's stream waits for every ready_q, then a kernel sums chunk r = [count*r/W, count*(r+1)/W)
//      over b_0, b_1, ..., b_{W-1} in that fixed order (so the result does not depend on timing and
//      equals the CPU ThreadCommunicator's) and writes the sum into chunk r of EVERY buffer;
//   4. record done_r on r's stream; host barrier; r's stream waits for every done_q, so whatever r
//      queues next (the optimizer reading b_r) runs after all chunks of b_r were written.
// The host waits only at the two barriers (for the other threads to queue their work), never for
// the GPU. Two barriers also make event reuse safe: nobody re-records an event of call n+1 before
// everybody has queued its waits on the events of call n.
//
// Contract: every worker passes a buffer on this communicator's GPU (checked; the error names the
// worker and both devices); at most kMaxWorkers workers. abort() wakes workers at the barriers;
// nothing ever waits on the GPU for a worker that did not arrive, so no GPU-side hang is possible.

#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "comm/thread_communicator.hpp"

namespace mnist {

class DeviceCommunicator : public Communicator {
 public:
  // The kernel takes every buffer pointer as an argument (no per-call device allocation).
  static constexpr int kMaxWorkers = 64;

  // Creates the events on GPU `gpu` (make it current on the calling thread, which may be any).
  DeviceCommunicator(int gpu, int workers);
  ~DeviceCommunicator() override;
  DeviceCommunicator(const DeviceCommunicator&) = delete;
  DeviceCommunicator& operator=(const DeviceCommunicator&) = delete;

  std::string name() const override;
  int local_size() const override { return workers_; }
  int global_size() const override { return workers_; }
  void all_reduce_sum(int local_rank, Backend& backend, float* data, std::size_t count) override;
  void abort() override;

 private:
  struct Events;  // CUDA events, kept out of this header
  int gpu_;
  int workers_;
  AbortableBarrier barrier_;
  std::unique_ptr<Events> events_;
};

}  // namespace mnist
