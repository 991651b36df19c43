#pragma once
// What each point came to, read back from its folders, and the sweep's table.
//
// A point is done when its run directory holds summary.json (a run writes it only when it
// completes); otherwise logs/<NAME>.json, written by the sweep when the point's process ended,
// says how it failed or was stopped. The table has one row per setting (the points that differ
// only in their seed), ranked by the mean validation accuracy when the summaries carry it
// (validation_accuracy, from data.validation_size) and by the mean test accuracy otherwise, as its
// first line says.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sweep/plan.hpp"

namespace mnist {

enum class PointState { done, failed, stopped, not_run };
const char* to_string(PointState s);

struct PointResult {
  PointState state = PointState::not_run;
  int exit_code = -1;          // of its last process (-1: none ran)
  std::string message;         // the last error line of that process's log
  double process_seconds = 0;  // that process's wall time, as the sweep timed it
  // From summary.json (done points); NaN where a value is null or absent.
  double test_accuracy = 0, test_loss = 0;
  std::optional<double> validation_accuracy, validation_loss, best_validation_accuracy;
  std::optional<int64_t> best_step;
  int64_t steps = 0;
  double steps_per_second = 0;  // samples_per_second / global_batch
  double wall_seconds = 0;      // the run's own (after a resume: of the steps its last process ran)
};

// The last error of a point's log: its last line starting "mnist-train: " after the last line
// starting `header_prefix` (the sweep's line before each attempt), without that prefix; else its
// last non-empty line; "" for an empty log.
std::string last_error_line(const std::string& log_text, const std::string& header_prefix);

// The status file of a point's last process (logs/<NAME>.json).
void write_point_status(const std::string& path, int exit_code, const std::string& message,
                        double wall_seconds);

// A point's result from its run directory and status file. Throws DataError naming the file when
// summary.json or the status file is not what the tool writes.
PointResult read_point_result(const std::string& run_dir, const std::string& status_path);

struct SweepTable {
  std::string title;  // "ranked by mean test accuracy (the summaries carry no validation accuracy)"
  bool by_validation = false;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;   // for Markdown: numbers rounded for reading
  std::vector<std::vector<std::string>> exact;  // for CSV: the same cells, numbers in full
  std::vector<std::string> failures;  // "point 5 (lr=1e6 seed=2): exit 4: diverged: step 12 ..."
  std::string best;                   // the best row's settings and score, for the closing line
};

// One row per setting of `points` (results[i] is points[i]'s), ranked.
SweepTable build_table(const std::vector<PlannedPoint>& points,
                       const std::vector<PointResult>& results);
std::string table_markdown(const SweepTable& table);
std::string table_csv(const SweepTable& table);
// One line per point: index, settings, seed, state, exit code, every summary figure, folder and
// message; numbers as summary.json writes them (9 significant digits).
std::string points_csv(const std::vector<PlannedPoint>& points,
                       const std::vector<PointResult>& results, const std::string& sweep_dir);

}  // namespace mnist
