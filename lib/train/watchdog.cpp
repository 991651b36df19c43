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
  int slowest = -1;
  double longest = 0;
  for (std::size_t k = 0; k < workers.size(); ++k) {
    if (workers[k].current() == Phase::idle) continue;
    const double busy = (now_ns - workers[k].since_ns.load()) / 1e9;
    if (busy > longest) {
      longest = busy;
      slowest = static_cast<int>(k);
    }
  }
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
