#pragma once
// `mnist-train sweep`: the whole command as the CLI runs it. Expands the spec into points, checks
// every one, places them, then either lists them (--dry-run), gathers their table (--collect),
// runs one (--point K, a Slurm array task), or runs them all on the slots, skipping the points
// that are done and resuming the ones that were stopped, and writes the table. Library code: it
// throws typed errors and reports an outcome; main() turns both into the exit code.

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "backend/cuda_devices.hpp"
#include "sweep/spec.hpp"
#include "train/progress.hpp"

namespace mnist {

struct SweepRequest {
  SweepSpec spec;
  std::string exe;               // the binary each point runs (this one)
  std::string data_root;         // the data root in effect, for checking the points
  std::string data_root_option;  // --data-root as given ("": none), passed on to each point
  std::string gpus;              // --gpus: all, 0,1 or auto:N; "": GPUs when the config would
  int per_gpu = 1;               // --per-gpu K
  int slots = 0;                 // --slots N: CPU points at once (0: 1)
  std::optional<int> point;      // --point K: only this point, in the foreground
  bool dry_run = false, collect = false;
  std::vector<std::string> point_args;  // more options for every point's process (--log-level)
};

enum class SweepOutcome {
  done,         // every point has its result
  some_failed,  // the sweep ran to its end, but some points failed (or, with --collect, lack one)
  interrupted,  // SIGINT / SIGTERM: the running points stopped with a checkpoint
  requeue,      // SIGUSR1: the same, and the job asks to be requeued
  point,        // --point K: the point's own exit code says it
};

struct SweepReport {
  SweepOutcome outcome = SweepOutcome::done;
  int point_exit_code = 0;  // with --point
  std::string dir;          // the sweep's folder
};

struct SweepHooks {
  // 0, or the stop signal received since the sweep started.
  std::function<int()> stop_signal;
  // The visible GPUs with their free memory (default: list_gpus_in_child()).
  std::function<std::vector<GpuInfo>()> list_gpus;
  std::shared_ptr<spdlog::logger> log;
  std::shared_ptr<ProgressLine> status;  // the live status line (may be null or disabled)
  std::ostream* out = nullptr;           // the listing and the table (stdout)
};

SweepReport run_sweep(const SweepRequest& request, const SweepHooks& hooks);

// The visible GPUs with their free memory, asked in a child process (fork), so the CUDA context
// that reading free memory creates dies with it instead of holding memory on every card for the
// whole sweep, and this process never initializes CUDA (its points are started by exec, which
// would not mind, but a fork after CUDA's initialization could not use it).
std::vector<GpuInfo> list_gpus_in_child();

}  // namespace mnist
