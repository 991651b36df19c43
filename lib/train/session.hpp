#pragma once
// One training run as the CLI runs it: data, devices, trainer, run directory, checkpoints
// (periodic, final, and on a stop request), resume. Kept out of main() so main only parses and maps
// outcomes to exit codes.

#include <functional>
#include <memory>
#include <string>

#include <spdlog/logger.h>

#include "comm/process_group.hpp"
#include "config/experiment.hpp"
#include "model/model.hpp"
#include "train/device_plan.hpp"
#include "train/progress.hpp"
#include "train/trainer.hpp"

namespace mnist {

// Values TrainerOptions::stop_requested returns (set by the CLI's signal handlers).
enum StopRequest : int { kNoStop = 0, kStopInterrupt = 1, kStopRequeue = 2 };

struct SessionOptions {
  // "" (start fresh), "auto" (newest valid checkpoint in the run directory, else start fresh), or a
  // checkpoint file.
  std::string resume;
  // Resume even when the checkpoint's math-relevant config differs (the differences are logged).
  bool force_resume = false;
  TrainerOptions trainer;  // stop_requested, phase_hook (checkpoint hooks are set by the session)
  // The live status line (may be null or disabled); erased before the run's closing lines.
  std::shared_ptr<ProgressLine> progress;
};

enum class SessionOutcome { completed, interrupted, requeue };

struct SessionResult {
  SessionOutcome outcome = SessionOutcome::completed;
  TrainSummary summary;
  std::string checkpoint;  // the last checkpoint written ("" if none)
};

// `group`: the processes of the run (size 1 without a launcher). Every rank trains its local
// workers; rank 0 alone writes the run directory and checkpoints.
SessionResult run_session(const Experiment& experiment, const Model& model,
                          const DevicePlan& devices, const SessionOptions& options,
                          std::shared_ptr<spdlog::logger> log, ProcessGroup& group);

}  // namespace mnist
