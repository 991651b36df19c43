#pragma once
// `mnist-train sweep`: its options on the command line and the call into lib/sweep. Beside
// main.cpp so the command line stays one file's shape; main() maps the outcome to the exit code.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/logger.h>
#include <CLI/CLI.hpp>

#include "sweep/sweep.hpp"
#include "train/progress.hpp"

namespace mnist_cli {

struct SweepOptions {
  CLI::App* app = nullptr;  // the subcommand
  std::string file;         // --sweep FILE
  std::vector<std::string> grid, list;
  std::string seeds, out;
  int per_gpu = 1, slots = 0, point = -1;
  bool collect = false;
};

// Adds the `sweep` subcommand and its options to `app`.
void add_sweep_subcommand(CLI::App& app, SweepOptions& options);

// What the tool's own options say to a sweep: the base config and the --set / --unset every point
// gets, --dry-run, --gpus (the cards the points run on), the data root, and the options passed on
// to each point's process.
struct SweepContext {
  std::string config_path;
  std::vector<std::string> overrides, unsets;
  bool dry_run = false;
  std::string gpus;
  std::string data_root, data_root_option;
  std::vector<std::string> point_args;
  std::function<int()> stop_signal;
  std::shared_ptr<spdlog::logger> log;
  std::shared_ptr<mnist::ProgressLine> status;
};

mnist::SweepReport run_sweep_command(const SweepOptions& options, const SweepContext& context);

}  // namespace mnist_cli
