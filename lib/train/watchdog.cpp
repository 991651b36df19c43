#include "train/watchdog.hpp"

#include <chrono>

#include <fmt/format.h>

namespace mnist {

void WorkerStatus::enter(Phase p, int64_t job_step) {
  step = job_step;
  since_ns = std::chrono::steady_clock::now().time_since_epoch().count();
  phase = static_cast<int>(p);
}

std::string find_stall(const std::vector<WorkerStatus>& workers,
                       const std::vector<std::string>& names, double limit_seconds,
                       int64_t now_ns) {
  // A worker in 'reduce' waits for the others, so it is named only when every busy worker is in
  // 'reduce' (the collective itself hangs). Otherwise the order in which threads reached their
  // phases (a descheduled thread can start its forward after a peer already waits in 'reduce')
  // would decide which worker is blamed.
  const auto longest_busy = [&](bool include_waiting, double& longest) {
    int slowest = -1;
    longest = 0;
    for (std::size_t k = 0; k < workers.size(); ++k) {
      const Phase p = workers[k].current();
      if (p == Phase::idle || (p == Phase::reduce && !include_waiting)) continue;
      const double busy = (now_ns - workers[k].since_ns.load()) / 1e9;
      if (slowest < 0 || busy > longest) {
        longest = busy;
        slowest = static_cast<int>(k);
      }
    }
    return slowest;
  };
  double longest = 0;
  int slowest = longest_busy(false, longest);
  if (slowest < 0) slowest = longest_busy(true, longest);
  if (slowest < 0 || longest <= limit_seconds) return "";
  std::string others;
  for (std::size_t k = 0; k < workers.size(); ++k) {
    if (static_cast<int>(k) == slowest) continue;
    const Phase p = workers[k].current();
    others += fmt::format("{}{} in '{}'", others.empty() ? "" : ", ", names[k], to_string(p));
    if (p != Phase::idle)
      others += fmt::format(" for {:.1f} s", (now_ns - workers[k].since_ns.load()) / 1e9);
  }
  const WorkerStatus& w = workers[slowest];
  return fmt::format(
      "{} stalled: step {} has been in phase '{}' for {:.1f} s (train.watchdog_seconds = {:g}); "
      "aborting the run{}",
      names[slowest], w.step.load() + 1, to_string(w.current()), longest, limit_seconds,
      others.empty() ? "" : " (" + others + ")");
}

}  // namespace mnist
