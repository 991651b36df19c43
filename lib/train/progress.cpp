#include "train/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"

namespace mnist {

std::atomic<bool> ProgressLine::visible_{false};

namespace {

constexpr int kBarWidth = 24;
// Redraws closer together than this are skipped: a terminal redrawn every millisecond flickers and
// costs the training loop time for nothing.
constexpr double kMinRedrawSeconds = 0.1;
// Erase from the cursor to the end of the line (ECMA-48 EL), after a carriage return.
constexpr char kEraseLine[] = "\r\x1b[K";

void write_all(int fd, const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n <= 0) return;  // a closed or full terminal must not stop training
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

std::string with_thousands(double value) {
  std::string digits = fmt::format("{:.0f}", std::max(0.0, value));
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

int terminal_columns(int fd) {
  winsize size{};
  if (::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 120;
}

}  // namespace

ProgressMode parse_progress_mode(const std::string& text) {
  if (text == "auto") return ProgressMode::auto_detect;
  if (text == "always") return ProgressMode::always;
  if (text == "never") return ProgressMode::never;
  MNIST_THROW(UsageError, "--progress {}: expected auto, always or never", text);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  const int64_t h = total / 3600, m = total / 60 % 60, s = total % 60;
  return h > 0 ? fmt::format("{}:{:02}:{:02}", h, m, s) : fmt::format("{:02}:{:02}", m, s);
}

std::string format_progress(const ProgressRecord& r, double loss, double accuracy, int width) {
  const double fraction =
      r.total_steps > 0 ? std::clamp(double(r.step) / double(r.total_steps), 0.0, 1.0) : 0.0;
  const int filled = static_cast<int>(fraction * kBarWidth);
  const int64_t done = r.step - r.first_step;
  const double eta = done > 0 ? r.elapsed_seconds / done * (r.total_steps - r.step) : -1;
  const int digits = static_cast<int>(std::to_string(r.total_steps).size());
  std::string line =
      fmt::format("step {:>{}}/{} [{}{}] {:3.0f}%  {} < {}", r.step, digits, r.total_steps,
                  std::string(filled, '#'), std::string(kBarWidth - filled, '-'), fraction * 100,
                  format_duration(r.elapsed_seconds), format_duration(eta));
  if (loss >= 0) line += fmt::format("  loss {:.4f}  acc {:.4f}", loss, accuracy);
  if (done > 0) line += fmt::format("  {} samples/s", with_thousands(r.samples_per_second));
  // One column short of the width: writing the last column makes some terminals wrap.
  if (width > 1 && static_cast<int>(line.size()) > width - 1) line.resize(width - 1);
  return line;
}

ProgressLine::ProgressLine(int fd, bool enabled) : fd_(fd), enabled_(enabled) {}

ProgressLine::~ProgressLine() {
  finish();
}

bool ProgressLine::enabled_for(ProgressMode mode, int fd) {
  if (mode == ProgressMode::always) return true;
  if (mode == ProgressMode::never) return false;
  const char* term = std::getenv("TERM");
  return ::isatty(fd) == 1 && !(term != nullptr && std::strcmp(term, "dumb") == 0);
}

void ProgressLine::on_step(const StepRecord& r) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  loss_ = r.loss;
  accuracy_ = r.accuracy;
}

void ProgressLine::on_progress(const ProgressRecord& r) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  const bool last = r.step >= r.total_steps;
  if (!last && !line_.empty() &&
      std::chrono::duration<double>(now - last_draw_).count() < kMinRedrawSeconds)
    return;
  last_draw_ = now;
  line_ = format_progress(r, loss_, accuracy_, terminal_columns(fd_));
  draw_locked();
}

void ProgressLine::show_text(const std::string& text, bool now) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto at = std::chrono::steady_clock::now();
  if (!now && !line_.empty() &&
      std::chrono::duration<double>(at - last_draw_).count() < kMinRedrawSeconds)
    return;
  last_draw_ = at;
  line_ = text;
  const int width = terminal_columns(fd_);
  // One column short of the width, as format_progress cuts its line.
  if (width > 1 && static_cast<int>(line_.size()) > width - 1) line_.resize(width - 1);
  draw_locked();
}

void ProgressLine::finish() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  erase_locked();
  line_.clear();
  loss_ = accuracy_ = -1;
}

void ProgressLine::hide() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  erase_locked();
}

void ProgressLine::show() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!line_.empty()) draw_locked();
}

void ProgressLine::draw_locked() {
  write_all(fd_, kEraseLine + line_);
  visible_.store(true, std::memory_order_relaxed);
}

void ProgressLine::erase_locked() {
  if (!visible_.load(std::memory_order_relaxed)) return;
  write_all(fd_, kEraseLine);
  visible_.store(false, std::memory_order_relaxed);
}

ProgressLogSink::ProgressLogSink(spdlog::sink_ptr inner, std::shared_ptr<ProgressLine> line)
    : inner_(std::move(inner)), line_(std::move(line)) {}

void ProgressLogSink::sink_it_(const spdlog::details::log_msg& msg) {
  line_->hide();
  inner_->log(msg);
  inner_->flush();
  line_->show();
}

void ProgressLogSink::flush_() {
  inner_->flush();
}

void ProgressLogSink::set_pattern_(const std::string& pattern) {
  inner_->set_pattern(pattern);
}

void ProgressLogSink::set_formatter_(std::unique_ptr<spdlog::formatter> formatter) {
  inner_->set_formatter(std::move(formatter));
}

}  // namespace mnist
