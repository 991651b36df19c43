#pragma once
// Learning rate as a function of the step: linear warm-up, then constant, step decay or cosine.

#include <cstdint>

#include "config/experiment.hpp"

namespace mnist {

// base_lr: the optimizer's lr (after any device-count scaling). step is 0-based; total_steps > 0.
// Warm-up: lr * (step + 1) / warmup_steps for step < warmup_steps.
// step:    lr * gamma^floor((step - warmup) / step_size).
// cosine:  min_lr + (lr - min_lr) * (1 + cos(pi * t)) / 2, t = (step - warmup) / (total - warmup).
double learning_rate_at(const ScheduleConfig& schedule, double base_lr, int64_t step,
                        int64_t total_steps);

}  // namespace mnist
