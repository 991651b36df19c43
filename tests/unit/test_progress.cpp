// The live status line: its text, when it draws, and that log lines stay above it.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <sstream>
#include <string>

#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include "core/error.hpp"
#include "train/progress.hpp"

using namespace mnist;

namespace {

// A pipe whose read end collects what the line writes.
struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() {
    REQUIRE(::pipe(fds) == 0);
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  }
  ~Pipe() {
    ::close(fds[0]);
    ::close(fds[1]);
  }
  int writer() const { return fds[1]; }
  std::string drain() const {
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, n);
    return text;
  }
};

ProgressRecord at(int64_t step, int64_t total, double elapsed, double rate = 1000) {
  ProgressRecord r;
  r.step = step;
  r.total_steps = total;
  r.elapsed_seconds = elapsed;
  r.samples_per_second = rate;
  return r;
}

}  // namespace

TEST_CASE("durations read as mm:ss, or h:mm:ss past an hour", "[progress]") {
  CHECK(format_duration(0) == "00:00");
  CHECK(format_duration(75.4) == "01:15");
  CHECK(format_duration(3599.6) == "1:00:00");
  CHECK(format_duration(3 * 3600 + 62) == "3:01:02");
  CHECK(format_duration(-1) == "--:--");
}

TEST_CASE("the status line shows step, bar, percent, elapsed, ETA, metrics and speed",
          "[progress]") {
  // 50 of 200 steps in 10 s: 150 steps left at 0.2 s each = 30 s.
  const std::string line = format_progress(at(50, 200, 10, 15321.4), 0.12345, 0.96094, 200);
  CHECK(line.find("step  50/200") == 0);
  CHECK(line.find("[######------------------]") != std::string::npos);  // 25% of 24 columns
  CHECK(line.find(" 25%") != std::string::npos);
  CHECK(line.find("00:10 < 00:30") != std::string::npos);
  CHECK(line.find("loss 0.1235  acc 0.9609") != std::string::npos);
  CHECK(line.find("15,321 samples/s") != std::string::npos);
  // Before the first logged step there is no loss to show; before the first step, no ETA.
  const std::string first = format_progress(at(0, 200, 0.5, 0), -1, -1, 200);
  CHECK(first.find("loss") == std::string::npos);
  CHECK(first.find("< --:--") != std::string::npos);
  CHECK(first.find("samples/s") == std::string::npos);
  // A resumed run's ETA counts only the steps this run has timed.
  ProgressRecord resumed = at(150, 200, 10);
  resumed.first_step = 100;  // 50 steps in 10 s, 50 left
  CHECK(format_progress(resumed, -1, -1, 200).find("00:10 < 00:10") != std::string::npos);
}

TEST_CASE("the status line never reaches the terminal's last column", "[progress]") {
  const std::string line = format_progress(at(5, 10, 1), 0.5, 0.5, 40);
  CHECK(line.size() == 39);
  CHECK(format_progress(at(10, 10, 1), 0.5, 0.5, 200).find("100%") != std::string::npos);
}

TEST_CASE("the --progress option takes auto, always or never", "[progress]") {
  CHECK(parse_progress_mode("auto") == ProgressMode::auto_detect);
  CHECK(parse_progress_mode("always") == ProgressMode::always);
  CHECK(parse_progress_mode("never") == ProgressMode::never);
  CHECK_THROWS_AS(parse_progress_mode("yes"), UsageError);
  CHECK_THROWS_WITH(parse_progress_mode("yes"), Catch::Contains("--progress yes"));
  Pipe pipe;  // not a terminal
  CHECK_FALSE(ProgressLine::enabled_for(ProgressMode::auto_detect, pipe.writer()));
  CHECK(ProgressLine::enabled_for(ProgressMode::always, pipe.writer()));
  CHECK_FALSE(ProgressLine::enabled_for(ProgressMode::never, pipe.writer()));
}

TEST_CASE("a disabled line writes nothing, an enabled one redraws in place", "[progress]") {
  Pipe pipe;
  {
    ProgressLine off(pipe.writer(), false);
    off.on_progress(at(1, 10, 1));
    off.finish();
  }
  CHECK(pipe.drain().empty());

  ProgressLine line(pipe.writer(), true);
  line.on_progress(at(1, 10, 1));
  std::string out = pipe.drain();
  CHECK(out.rfind("\r\x1b[Kstep  1/10", 0) == 0);
  CHECK(out.find('\n') == std::string::npos);  // redrawn in place, never scrolled
  CHECK(ProgressLine::visible());
  // Redraws within 0.1 s of the last are skipped, except the last step's.
  line.on_progress(at(2, 10, 1.01));
  CHECK(pipe.drain().empty());
  StepRecord logged;
  logged.loss = 0.25;
  logged.accuracy = 0.875;
  line.on_step(logged);
  line.on_progress(at(10, 10, 2));
  out = pipe.drain();
  CHECK(out.find("step 10/10") != std::string::npos);
  CHECK(out.find("loss 0.2500  acc 0.8750") != std::string::npos);
  line.finish();
  CHECK(pipe.drain() == "\r\x1b[K");
  CHECK_FALSE(ProgressLine::visible());
}

TEST_CASE("log lines print above the status line, which is drawn again below them", "[progress]") {
  Pipe pipe;
  auto line = std::make_shared<ProgressLine>(pipe.writer(), true);
  std::ostringstream logged;
  auto inner = std::make_shared<spdlog::sinks::ostream_sink_mt>(logged);
  auto sink = std::make_shared<ProgressLogSink>(inner, line);
  spdlog::logger log("progress-test", sink);
  log.set_pattern("%v");

  line->on_progress(at(3, 10, 1));
  CHECK(pipe.drain().find("step  3/10") != std::string::npos);
  log.info("step 3/10 loss 0.5");
  // The line was erased before the log line and drawn again after it.
  CHECK(logged.str() == "step 3/10 loss 0.5\n");
  CHECK(pipe.drain() == "\r\x1b[K\r\x1b[K" + format_progress(at(3, 10, 1), -1, -1, 120));
  line->finish();
  pipe.drain();
  log.info("after the run");  // nothing drawn any more
  CHECK(pipe.drain().empty());
}
