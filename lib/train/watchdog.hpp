#pragma once
// The coordinator's view of its workers while it waits for a job: which phase each is in, of which
// step, since when; and the rule that names a stalled one.

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "train/worker.hpp"

namespace mnist {

// Written by one worker thread, read by the coordinator (lock-free).
struct WorkerStatus {
  std::atomic<int> phase{static_cast<int>(Phase::idle)};
  std::atomic<int64_t> step{0};      // 0-based step of the job in hand
  std::atomic<int64_t> since_ns{0};  // steady_clock time the phase was entered

  void enter(Phase p, int64_t job_step);
  void leave() { phase = static_cast<int>(Phase::idle); }
  Phase current() const { return static_cast<Phase>(phase.load()); }
};

// The worker longest in one phase other than 'idle' and 'reduce' holds the others up: they wait
// for it in the collective. (Only when every busy worker is in 'reduce' is the longest of those
// named: the collective itself hangs.) When its time exceeds `limit_seconds`
// (train.watchdog_seconds), returns the error naming it, its step (1-based) and phase, and where
// every other worker is; otherwise "".
// `names[k]` names workers[k]; `now_ns` is steady_clock time.
std::string find_stall(const std::vector<WorkerStatus>& workers,
                       const std::vector<std::string>& names, double limit_seconds, int64_t now_ns);

}  // namespace mnist
