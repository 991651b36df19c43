#include "train/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace mnist {

double learning_rate_at(const ScheduleConfig& s, double base_lr, int64_t step,
                        int64_t total_steps) {
  if (step < s.warmup_steps) return base_lr * static_cast<double>(step + 1) / s.warmup_steps;
  const int64_t after = step - s.warmup_steps;
  switch (s.kind) {
    case ScheduleKind::constant:
      return base_lr;
    case ScheduleKind::step:
      return base_lr *
             std::pow(s.gamma, static_cast<double>(after / std::max<int64_t>(s.step_size, 1)));
    case ScheduleKind::cosine: {
      const int64_t span = std::max<int64_t>(total_steps - s.warmup_steps, 1);
      const double t = std::min(1.0, static_cast<double>(after) / span);
      return s.min_lr + (base_lr - s.min_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
    }
  }
  return base_lr;
}

}  // namespace mnist
