#pragma once
// What a run leaves behind and prints: the console line every log_every steps, metrics.jsonl (one
// JSON object per logged step and per evaluation), the resolved config, and summary.json.
// The console line is formatted from the same record that goes into metrics.jsonl.

#include <fstream>
#include <memory>
#include <string>

#include <spdlog/logger.h>

#include "config/experiment.hpp"
#include "train/trainer.hpp"

namespace mnist {

class RunLog : public RunObserver {
 public:
  // Creates output.dir (parents too) and writes config.yaml there; `write_files` is false on
  // ranks other than 0, which then only log nothing.
  RunLog(const Experiment& experiment, std::shared_ptr<spdlog::logger> logger, bool write_files);

  void on_step(const StepRecord& r) override;
  void on_eval(const EvalRecord& r) override;
  // The line that says the run stopped early (train.patience), when it did.
  void early_stop(const TrainSummary& s, int64_t total_steps);
  // Writes summary.json and prints the final lines.
  void finish(const TrainSummary& s, const std::string& devices, const std::string& data_source);
  const std::string& dir() const { return dir_; }

  static std::string step_json(const StepRecord& r);
  static std::string eval_json(const EvalRecord& r);

 private:
  const Experiment& experiment_;
  std::shared_ptr<spdlog::logger> log_;
  bool write_files_;
  std::string dir_;
  std::ofstream metrics_;
};

}  // namespace mnist
