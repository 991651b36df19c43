#pragma once
// Live progress on a terminal: one status line at the bottom of stderr, redrawn in place after
// every step (at most ten times a second), with the periodic log lines printed above it:
//
//   step  120/200 [##############----------]  60%  00:07 < 00:04  loss 0.1234  acc 0.9609  15,321
//   samples/s
//
// Only where a person watches: `auto` draws when stderr is a terminal (and TERM is not "dumb"), so
// batch jobs, pipes and CI get the log lines alone, byte for byte as without it. `always` draws
// anyway (tests), `never` never does.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <spdlog/sinks/base_sink.h>

#include "train/trainer.hpp"

namespace mnist {

enum class ProgressMode { auto_detect, always, never };
// "auto", "always" or "never"; anything else is a UsageError naming --progress.
ProgressMode parse_progress_mode(const std::string& text);

// "1:02:03" above an hour, else "02:03".
std::string format_duration(double seconds);
// The status line for `r`, cut to `width` columns. `loss`/`accuracy` are those of the last logged
// step (negative: none yet, left out).
std::string format_progress(const ProgressRecord& r, double loss, double accuracy, int width);

class ProgressLine : public RunObserver {
 public:
  // `fd`: where the line is drawn (stderr). `enabled` false: every call does nothing.
  ProgressLine(int fd, bool enabled);
  // Whether `mode` draws on `fd` (a terminal test for auto).
  static bool enabled_for(ProgressMode mode, int fd);
  ~ProgressLine() override;

  bool enabled() const { return enabled_; }
  void on_step(const StepRecord& r) override;
  void on_progress(const ProgressRecord& r) override;
  // Draws `text` as the line (a sweep's status: points done, running, queued), cut to the
  // terminal's width; redrawn at most ten times a second unless `now` is true.
  void show_text(const std::string& text, bool now = false);
  // Erases the line for good (end of the run); the next on_progress draws a new one.
  void finish();

  // For the log sink: erase the line before a log line, draw it again after.
  void hide();
  void show();

  // True while a line is drawn on the terminal: the signal handlers, which cannot lock, read it to
  // start their message on a clean line.
  static bool visible() { return visible_.load(std::memory_order_relaxed); }

 private:
  void draw_locked();
  void erase_locked();

  int fd_;
  bool enabled_;
  std::mutex mutex_;
  std::string line_;  // last drawn text ("" = nothing to draw)
  double loss_ = -1, accuracy_ = -1;
  std::chrono::steady_clock::time_point last_draw_{};
  static std::atomic<bool> visible_;
};

// A spdlog sink that keeps the status line below the log: each log line erases the status line,
// is written by `inner`, and the status line is drawn again.
class ProgressLogSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  ProgressLogSink(spdlog::sink_ptr inner, std::shared_ptr<ProgressLine> line);

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override;
  void set_pattern_(const std::string& pattern) override;
  void set_formatter_(std::unique_ptr<spdlog::formatter> formatter) override;

 private:
  spdlog::sink_ptr inner_;
  std::shared_ptr<ProgressLine> line_;
};

}  // namespace mnist
