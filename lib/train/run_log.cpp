#include "train/run_log.hpp"

#include <filesystem>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json.hpp"

namespace mnist {

namespace {
// JSON has no NaN/Infinity: non-finite numbers become null.
std::string json_number(double v) {
  return std::isfinite(v) ? fmt::format("{:.9g}", v) : "null";
}
}  // namespace

RunLog::RunLog(const Experiment& experiment, std::shared_ptr<spdlog::logger> logger,
               bool write_files)
    : experiment_(experiment),
      log_(std::move(logger)),
      write_files_(write_files),
      dir_(experiment.output.dir) {
  if (!write_files_) return;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  // The path is the config's (output.dir): a usage error, not a runtime failure.
  if (ec)
    MNIST_THROW(ConfigError,
                "output.dir: cannot create the run directory '{}': {} (output.dir must name a "
                "folder this process can create and write)",
                dir_, ec.message());
  // Replaced, never opened: whatever is under the name (a FIFO, say) cannot block the write.
  const std::string config = to_yaml(experiment);
  write_file_atomically(dir_ + "/config.yaml", config.data(), config.size());
  // Appended to across resumes, so opened in place: refused unless it is a regular file.
  require_regular_or_absent(dir_ + "/metrics.jsonl", "output.dir");
  metrics_.open(dir_ + "/metrics.jsonl", std::ios::app);
  if (!metrics_)
    MNIST_THROW(ConfigError,
                "output.dir: cannot write metrics.jsonl in the run directory '{}' (output.dir "
                "must name a folder this process can create and write)",
                dir_);
}

std::string RunLog::step_json(const StepRecord& r) {
  return fmt::format(
      "{{\"type\":\"train\",\"step\":{},\"total_steps\":{},\"epoch\":{},\"loss\":{},\"accuracy\":{}"
      ","
      "\"lr\":{},\"samples_per_second\":{},\"compute_ms\":{},\"comm_ms\":{},\"wait_ms\":{}}}",
      r.step, r.total_steps, json_number(r.epoch), json_number(r.loss), json_number(r.accuracy),
      json_number(r.lr), json_number(r.samples_per_second), json_number(r.compute_ms),
      json_number(r.comm_ms), json_number(r.wait_ms));
}

std::string RunLog::eval_json(const EvalRecord& r) {
  std::string extra;
  if (r.split == EvalSplit::validation && r.best_step >= 0)
    extra = fmt::format(",\"improved\":{},\"best_step\":{},\"evaluations_since_best\":{}",
                        r.improved ? "true" : "false", r.best_step, r.evaluations_since_best);
  if (r.of_best) extra = ",\"checkpoint\":\"best\"";
  return fmt::format(
      "{{\"type\":\"eval\",\"split\":\"{}\",\"step\":{},\"loss\":{},\"accuracy\":{},"
      "\"samples\":{}{}}}",
      to_string(r.split), r.step, json_number(r.loss), json_number(r.accuracy), r.samples, extra);
}

void RunLog::on_step(const StepRecord& r) {
  if (!write_files_) return;
  metrics_ << step_json(r) << '\n';
  metrics_.flush();
  if (experiment_.output.log_format == LogFormat::seed) {
    log_->info("Step:{}:{:.6f} {:.6f}", r.step, r.loss, r.accuracy);
  } else {
    const int width = static_cast<int>(std::to_string(r.total_steps).size());
    log_->info(
        "step {:>{}}/{} epoch {:.2f} loss {:.4f} acc {:.4f} lr {:.2e} {:.0f} samples/s "
        "compute {:.2f} ms comm {:.2f} ms wait {:.2f} ms",
        r.step, width, r.total_steps, r.epoch, r.loss, r.accuracy, r.lr, r.samples_per_second,
        r.compute_ms, r.comm_ms, r.wait_ms);
  }
}

void RunLog::on_eval(const EvalRecord& r) {
  if (!write_files_) return;
  metrics_ << eval_json(r) << '\n';
  metrics_.flush();
  if (experiment_.output.log_format == LogFormat::seed) return;
  if (r.of_best) {
    log_->info("test on the best checkpoint (step {}): loss {:.4f} accuracy {:.4f} ({} images)",
               r.step, r.loss, r.accuracy, r.samples);
    return;
  }
  std::string best;
  if (r.split == EvalSplit::validation && r.best_step >= 0) {
    const int patience = experiment_.train.patience;
    best = r.improved ? "; best so far"
                      : fmt::format("; best at step {}, {} evaluation{} without improvement{}",
                                    r.best_step, r.evaluations_since_best,
                                    r.evaluations_since_best == 1 ? "" : "s",
                                    patience > 0 ? fmt::format(" (patience {})", patience) : "");
  }
  log_->info("eval at step {}: {} loss {:.4f} accuracy {:.4f} ({} images){}", r.step,
             to_string(r.split), r.loss, r.accuracy, r.samples, best);
}

void RunLog::early_stop(const TrainSummary& s, int64_t total_steps) {
  if (!write_files_ || !s.stopped_early) return;
  log_->info(
      "early stop at step {} of {}: {} did not improve for {} evaluations (train.patience {}); "
      "best at step {}",
      s.steps, total_steps, to_string(s.keep_best), s.selection.evaluations_since_best,
      experiment_.train.patience, s.selection.best_step);
}

void RunLog::finish(const TrainSummary& s, const std::string& devices,
                    const std::string& data_source) {
  if (!write_files_) return;
  if (experiment_.output.log_format == LogFormat::seed) {
    log_->info("Done");
    log_->info("Testing Accuracy: {:.4f}", s.final_eval.accuracy);
  }
  // After a resume the time and rate are of the steps this process ran, and the line says so.
  const int64_t ran = s.steps - s.first_step;
  const std::string steps =
      s.first_step == 0
          ? fmt::format("{} step{} of {}", s.steps, s.steps == 1 ? "" : "s", s.global_batch)
          : fmt::format("step {} (resumed at {}: {} step{} of {} run here)", s.steps, s.first_step,
                        ran, ran == 1 ? "" : "s", s.global_batch);
  const SelectionState& best = s.selection;
  std::string chosen;
  if (s.has_validation) {
    chosen = fmt::format("; validation accuracy {:.4f}, loss {:.4f}", s.final_validation.accuracy,
                         s.final_validation.loss);
    if (best.best_step >= 0)
      chosen +=
          fmt::format("; best step {} (validation accuracy {:.4f}{}, checkpoints/{})",
                      best.best_step, best.best_accuracy,
                      s.best_test ? fmt::format(", test accuracy {:.4f}", s.best_test->accuracy)
                                  : std::string(),
                      "best.safetensors");
  }
  log_->info(
      "done: {} in {:.2f} s ({:.0f} samples/s); test accuracy {:.4f}, loss {:.4f}{}; "
      "run directory {}",
      steps, s.wall_seconds, s.samples_per_second, s.final_eval.accuracy, s.final_eval.loss, chosen,
      dir_);
  // The validation keys only with a validation split, the best's only with a best kept: a reader
  // (a sweep's ranking) takes their presence as the run's answer to "was there one".
  std::string validation;
  if (s.has_validation) {
    validation =
        fmt::format(",\"validation_loss\":{},\"validation_accuracy\":{},\"validation_samples\":{}",
                    json_number(s.final_validation.loss), json_number(s.final_validation.accuracy),
                    s.final_validation.samples);
    if (best.best_step >= 0)
      validation += fmt::format(
          ",\"keep_best\":{},\"best_step\":{},\"best_validation_loss\":{},"
          "\"best_validation_accuracy\":{},\"best_test_loss\":{},\"best_test_accuracy\":{}",
          json::quote(to_string(s.keep_best)), best.best_step, json_number(best.best_loss),
          json_number(best.best_accuracy), s.best_test ? json_number(s.best_test->loss) : "null",
          s.best_test ? json_number(s.best_test->accuracy) : "null");
  }
  const std::string summary = fmt::format(
      "{{\"name\":{},\"steps\":{},\"first_step\":{},\"global_batch\":{},\"wall_seconds\":{},"
      "\"samples_per_second\":{}"
      ","
      "\"final_train_loss\":{},\"final_train_accuracy\":{},\"test_loss\":{},\"test_accuracy\":{},"
      "\"test_samples\":{}{},\"stopped_early\":{},\"devices\":{},\"data\":{}}}\n",
      json::quote(experiment_.name), s.steps, s.first_step, s.global_batch,
      json_number(s.wall_seconds), json_number(s.samples_per_second), json_number(s.last_step.loss),
      json_number(s.last_step.accuracy), json_number(s.final_eval.loss),
      json_number(s.final_eval.accuracy), s.final_eval.samples, validation,
      s.stopped_early ? "true" : "false", json::quote(devices), json::quote(data_source));
  // Replaced as a whole (a FIFO left under the name is replaced, not waited on).
  write_file_atomically(dir_ + "/summary.json", summary.data(), summary.size());
}

}  // namespace mnist
