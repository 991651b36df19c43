#include "sweep/sweep.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/cpu_threads.hpp"
#include "core/error.hpp"
#include "sweep/placement.hpp"
#include "sweep/plan.hpp"
#include "sweep/results.hpp"
#include "sweep/supervisor.hpp"

namespace mnist {

namespace fs = std::filesystem;

namespace {

// The line the sweep writes into a point's log before each of its processes.
constexpr const char* kLogHeader = "== mnist-train sweep: ";

// The last 64 KiB of a log: enough for its closing lines, whatever the run's length.
std::string log_tail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff from = std::max<std::streamoff>(0, size - 65536);
  in.seekg(from);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
  }
  return fmt::format("signal {}", sig);
}

std::string shell_quote(const std::string& arg) {
  if (!arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789._-/=:,+@") == std::string::npos)
    return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Everything the sweep decided before running: its points, where they run, its folder.
struct SweepPlan {
  Experiment base;
  std::string dir;
  std::vector<PlannedPoint> points;
  SweepPlacement placement;
};

SweepPlan make_plan(const SweepRequest& request, const SweepHooks& hooks) {
  SweepPlan plan;
  plan.base = load_base_experiment(request.spec, request.data_root);
  plan.dir = sweep_dir(request.spec, plan.base);
  if (plan.dir.find_first_of("{}") != std::string::npos)
    MNIST_THROW(UsageError, "--out {}: the sweep's folder takes no placeholders", plan.dir);
  const std::vector<SweepPoint> points = expand_points(request.spec);
  if (request.point && (*request.point < 0 || *request.point >= static_cast<int>(points.size())))
    MNIST_THROW(UsageError, "--point {}: the sweep has points 0..{}", *request.point,
                points.size() - 1);
  const bool cpu_config = plan.base.devices.backend == BackendChoice::cpu;
  if (!request.gpus.empty() && cpu_config)
    MNIST_THROW(UsageError,
                "--gpus {}: the base config trains on the CPU (devices.backend: cpu); add --set "
                "devices.backend=cuda, or leave --gpus out to run the points on the CPU",
                request.gpus);
  // GPUs are asked for only where the config could use them; --collect places nothing.
  std::vector<GpuInfo> gpus;
  if (!request.collect && !cpu_config) {
    gpus = hooks.list_gpus ? hooks.list_gpus() : list_gpus_in_child();
    if (!request.gpus.empty() || plan.base.devices.backend == BackendChoice::cuda || !gpus.empty())
      gpus = select_gpus(request.gpus.empty() ? "all" : request.gpus, gpus);
  }
  const bool on_gpus = !gpus.empty();
  if (!on_gpus && request.per_gpu != 1)
    MNIST_THROW(UsageError, "--per-gpu {}: the points run on the CPU (no GPU placement)",
                request.per_gpu);
  if (on_gpus && request.slots > 0)
    MNIST_THROW(UsageError,
                "--slots {}: the points run on GPUs, --per-gpu K sets how many share a card",
                request.slots);
  std::vector<std::string> placement_sets;
  int concurrent = 1;
  if (request.collect) {
    // No placement: the folders are named without it.
  } else if (on_gpus) {
    placement_sets = {"devices.gpus=all"};
    concurrent = request.point ? 1 : static_cast<int>(gpus.size()) * request.per_gpu;
  } else {
    const CpuThreads threads = usable_cpu_threads();
    const int slots = request.point ? 1 : std::max(request.slots, 1);
    plan.placement = place_on_cpu(slots, threads.count, threads.limit);
    placement_sets = plan.placement.slots.front().overrides();
    concurrent = slots;
  }
  plan.points = plan_points(request.spec, points, placement_sets, request.data_root, concurrent);
  if (on_gpus) {
    uint64_t largest = 0;
    for (const PlannedPoint& p : plan.points)
      largest = std::max(largest, gpu_run_bytes(p.replica_bytes, 1, p.dataset_bytes));
    if (request.point) gpus.resize(1);  // an array task's point: the task's first card
    plan.placement = place_on_gpus(gpus, request.point ? 1 : request.per_gpu, largest,
                                   std::getenv("CUDA_VISIBLE_DEVICES"));
  }
  return plan;
}

// The sweep as run, for people reading the folder later and for --collect's check.
void write_manifest(const SweepRequest& request, const SweepPlan& plan) {
  std::string text = fmt::format("mnist-train sweep of {}\n", request.spec.config_path);
  for (const std::string& u : request.spec.unsets) text += "unset " + u + "\n";
  for (const std::string& o : request.spec.overrides) text += "set " + o + "\n";
  text += fmt::format("{} points; placement: {}\n", plan.points.size(), plan.placement.summary);
  for (const PlannedPoint& p : plan.points)
    text += fmt::format("point {} row {}: {} -> points/{}\n", p.point.index, p.point.row,
                        p.point.label(), p.name);
  write_file_atomically((fs::path(plan.dir) / "sweep.txt").string(), text.data(), text.size());
}

ChildLaunch point_launch(const SweepRequest& request, const SweepPlan& plan, const PlannedPoint& p,
                         const SweepSlot& slot) {
  ChildLaunch launch;
  launch.argv = {request.exe, "--config", request.spec.config_path};
  for (const std::string& u : request.spec.unsets) {
    launch.argv.push_back("--unset");
    launch.argv.push_back(u);
  }
  std::vector<std::string> sets = request.spec.overrides;
  for (const std::string& o : p.point.overrides()) sets.push_back(o);
  for (const std::string& o : slot.overrides()) sets.push_back(o);
  sets.push_back("output.dir=" + p.run_dir(plan.dir));
  for (const std::string& s : sets) {
    launch.argv.push_back("--set");
    launch.argv.push_back(s);
  }
  for (const char* a : {"--resume", "auto", "--progress", "never"}) launch.argv.push_back(a);
  if (!request.data_root_option.empty()) {
    launch.argv.push_back("--data-root");
    launch.argv.push_back(request.data_root_option);
  }
  for (const std::string& a : request.point_args) launch.argv.push_back(a);
  if (slot.gpu) launch.env.push_back("CUDA_VISIBLE_DEVICES=" + slot.cuda_visible_devices);
  launch.log_path = p.log_path(plan.dir);
  std::string command;
  for (const std::string& a : launch.argv) command += (command.empty() ? "" : " ") + shell_quote(a);
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[32] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  launch.log_header = fmt::format(
      "{}point {} ({}) on {}, {}: {}{}", kLogHeader, p.point.index, p.point.label(),
      slot.describe(), when,
      slot.gpu ? "CUDA_VISIBLE_DEVICES=" + slot.cuda_visible_devices + " " : std::string(),
      command);
  return launch;
}

std::vector<PointResult> read_results(const SweepPlan& plan) {
  std::vector<PointResult> results;
  for (const PlannedPoint& p : plan.points)
    results.push_back(read_point_result(p.run_dir(plan.dir), p.status_path(plan.dir)));
  return results;
}

// Writes results.md, results.csv and points.csv, prints the Markdown table.
void write_table(const SweepPlan& plan, const std::vector<PointResult>& results,
                 const SweepHooks& hooks) {
  const SweepTable table = build_table(plan.points, results);
  const std::string md = table_markdown(table), csv = table_csv(table),
                    points = points_csv(plan.points, results, plan.dir);
  const fs::path dir(plan.dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  write_file_atomically((dir / "results.md").string(), md.data(), md.size());
  write_file_atomically((dir / "results.csv").string(), csv.data(), csv.size());
  write_file_atomically((dir / "points.csv").string(), points.data(), points.size());
  if (hooks.out) *hooks.out << md << std::flush;
  if (hooks.log)
    hooks.log->info("table: {} ({}), {}, {}{}", (dir / "results.md").string(), table.title,
                    (dir / "results.csv").string(), (dir / "points.csv").string(),
                    table.best.empty() ? "" : "; best: " + table.best);
}

void dry_run_listing(const SweepPlan& plan, const SweepHooks& hooks) {
  if (!hooks.out) return;
  std::ostream& out = *hooks.out;
  const std::vector<PointResult> results = read_results(plan);
  int rows = 0;
  for (const PlannedPoint& p : plan.points) rows = std::max(rows, p.point.row + 1);
  out << fmt::format("sweep {}: {} point{} ({} setting{}), every one checked; placement: {}\n",
                     plan.dir, plan.points.size(), plan.points.size() == 1 ? "" : "s", rows,
                     rows == 1 ? "" : "s", plan.placement.summary);
  const std::size_t slots = std::max<std::size_t>(plan.placement.slots.size(), 1);
  for (std::size_t i = 0; i < plan.points.size(); ++i) {
    const PlannedPoint& p = plan.points[i];
    const PointResult& r = results[i];
    const std::string state = r.state == PointState::done      ? "done: skipped"
                              : r.state == PointState::stopped ? "stopped: resumes"
                              : r.state == PointState::failed
                                  ? fmt::format("failed (exit {}): runs again", r.exit_code)
                              : fs::exists(p.run_dir(plan.dir)) ? "started: resumes"
                                                                : "new";
    const std::string where = plan.placement.slots.empty()
                                  ? std::string("-")
                                  : plan.placement.slots[i % slots].describe();
    out << fmt::format("  point {:>3}  {}  [{}]  {}  -> {}\n", p.point.index, p.point.label(),
                       state, i < slots ? "on " + where : "queued for " + where,
                       p.run_dir(plan.dir));
  }
}

// The line drawn on a terminal while points run.
struct SweepCounts {
  int total = 0, done = 0, failed = 0, running = 0, skipped = 0;
  double best = std::nan("");
  std::string best_label, best_metric = "test acc";
  std::string line(double elapsed) const {
    const int queued = total - done - failed - running - skipped;
    std::string text = fmt::format("sweep: {}/{} done, {} running, {} queued", done + skipped,
                                   total, running, queued);
    if (failed > 0) text += fmt::format(", {} failed", failed);
    text += "  " + format_duration(elapsed);
    if (std::isfinite(best))
      text += fmt::format("  best {} {:.4f} ({})", best_metric, best, best_label);
    return text;
  }
};

}  // namespace

std::vector<GpuInfo> list_gpus_in_child() {
  int fds[2];
  if (::pipe(fds) != 0)
    MNIST_THROW(RuntimeError, "cannot ask for the GPUs: pipe: {}", std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    MNIST_THROW(RuntimeError, "cannot ask for the GPUs: fork: {}", std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::string text;
    for (const GpuInfo& g : list_gpus())
      text += fmt::format("{}\t{}\t{}\t{}\n", g.ordinal, g.free_bytes, g.total_bytes, g.name);
    std::size_t written = 0;
    while (written < text.size()) {
      const ssize_t n = ::write(fds[1], text.data() + written, text.size() - written);
      if (n <= 0) ::_exit(1);
      written += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof(buffer))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    MNIST_THROW(RuntimeError, "the process asking for the GPUs failed (status {})", status);
  std::vector<GpuInfo> gpus;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    GpuInfo g;
    fields >> g.ordinal >> g.free_bytes >> g.total_bytes;
    std::getline(fields >> std::ws, g.name);
    gpus.push_back(g);
  }
  return gpus;
}

SweepReport run_sweep(const SweepRequest& request, const SweepHooks& hooks) {
  const SweepPlan plan = make_plan(request, hooks);
  SweepReport report;
  report.dir = plan.dir;
  if (request.dry_run) {
    dry_run_listing(plan, hooks);
    return report;
  }
  if (request.collect) {
    const std::vector<PointResult> results = read_results(plan);
    write_table(plan, results, hooks);
    const bool all = std::all_of(results.begin(), results.end(),
                                 [](const PointResult& r) { return r.state == PointState::done; });
    report.outcome = all ? SweepOutcome::done : SweepOutcome::some_failed;
    return report;
  }

  for (const char* sub : {"points", "logs"}) {
    std::error_code ec;
    fs::create_directories(fs::path(plan.dir) / sub, ec);
    if (ec)
      MNIST_THROW(UsageError, "cannot create the sweep's folder {}: {}",
                  (fs::path(plan.dir) / sub).string(), ec.message());
  }
  if (!request.point) write_manifest(request, plan);

  std::vector<PointResult> results = read_results(plan);
  SweepCounts counts;
  counts.total = static_cast<int>(plan.points.size());
  std::vector<int> jobs;
  auto note_best = [&](const PlannedPoint& p, const PointResult& r) {
    const bool by_validation = r.validation_accuracy.has_value();
    const double score = by_validation ? *r.validation_accuracy : r.test_accuracy;
    if (!std::isfinite(score) || (std::isfinite(counts.best) && score <= counts.best)) return;
    counts.best = score;
    counts.best_metric = by_validation ? "val acc" : "test acc";
    counts.best_label = p.point.label();
  };
  for (std::size_t i = 0; i < plan.points.size(); ++i) {
    if (request.point && static_cast<int>(i) != *request.point) continue;
    if (results[i].state == PointState::done) {
      ++counts.skipped;
      note_best(plan.points[i], results[i]);
      continue;
    }
    jobs.push_back(static_cast<int>(i));
  }
  const auto log = hooks.log;
  if (log) {
    log->info("sweep {}: {} point{}, {} to run ({} done already); placement: {}", plan.dir,
              plan.points.size(), plan.points.size() == 1 ? "" : "s", jobs.size(), counts.skipped,
              plan.placement.summary);
  }
  if (request.point) counts.total = 1;
  if (request.point && jobs.empty()) {
    if (log)
      log->info("point {} is done already: {}", *request.point,
                plan.points[*request.point].run_dir(plan.dir));
    report.outcome = SweepOutcome::point;
    report.point_exit_code = 0;
    return report;
  }

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  int point_code = 0;
  SupervisorHooks sup;
  sup.stop_signal = hooks.stop_signal;
  sup.launch = [&](int job, const SweepSlot& slot) {
    return point_launch(request, plan, plan.points[job], slot);
  };
  sup.started = [&](int job, const SweepSlot& slot) {
    ++counts.running;
    const PlannedPoint& p = plan.points[job];
    if (log)
      log->info("point {} started on {}: {} ({})", p.point.index, slot.describe(), p.point.label(),
                results[job].state == PointState::not_run ? "new" : "resuming");
    if (hooks.status) hooks.status->show_text(counts.line(elapsed()), true);
  };
  sup.ended = [&](int job, const SweepSlot&, const JobEnd& end) {
    --counts.running;
    const PlannedPoint& p = plan.points[job];
    const std::string message =
        end.exit_code == 0 ? "" : last_error_line(log_tail(p.log_path(plan.dir)), kLogHeader);
    write_point_status(p.status_path(plan.dir), end.exit_code, message, end.wall_seconds);
    results[job] = read_point_result(p.run_dir(plan.dir), p.status_path(plan.dir));
    const PointResult& r = results[job];
    point_code = end.exit_code;
    if (r.state == PointState::done) {
      ++counts.done;
      note_best(p, r);
      if (log)
        log->info("point {} done in {:.1f} s: {}{}test accuracy {:.4f}, loss {:.4f} ({})",
                  p.point.index, end.wall_seconds,
                  r.validation_accuracy
                      ? fmt::format("validation accuracy {:.4f}, ", *r.validation_accuracy)
                      : std::string(),
                  "", r.test_accuracy, r.test_loss, p.point.label());
    } else if (r.state == PointState::stopped) {
      if (log)
        log->warn("point {} stopped with a checkpoint (exit {}): {}", p.point.index, end.exit_code,
                  p.point.label());
    } else {
      ++counts.failed;
      if (log)
        log->error("point {} failed (exit {}) after {:.1f} s: {}: {} (log: {})", p.point.index,
                   end.exit_code, end.wall_seconds, p.point.label(),
                   message.empty() ? "no message" : message, p.log_path(plan.dir));
    }
    if (hooks.status) hooks.status->show_text(counts.line(elapsed()), true);
  };
  sup.tick = [&] {
    if (hooks.status) hooks.status->show_text(counts.line(elapsed()));
  };
  const int stopped = supervise(jobs, plan.placement.slots, sup);
  if (hooks.status) hooks.status->finish();

  if (request.point) {
    report.outcome = SweepOutcome::point;
    report.point_exit_code = point_code;
    return report;
  }
  if (stopped != 0 && log)
    log->warn(
        "stopped by {} after {}: {} point{} ran to {} end; rerun the same command to "
        "continue (finished points are skipped, stopped ones resume)",
        signal_name(stopped), format_duration(elapsed()), counts.done, counts.done == 1 ? "" : "s",
        counts.done == 1 ? "its" : "their");
  results = read_results(plan);
  write_table(plan, results, hooks);
  const bool all = std::all_of(results.begin(), results.end(),
                               [](const PointResult& r) { return r.state == PointState::done; });
  if (stopped == SIGUSR1)
    report.outcome = SweepOutcome::requeue;
  else if (stopped != 0)
    report.outcome = SweepOutcome::interrupted;
  else
    report.outcome = all ? SweepOutcome::done : SweepOutcome::some_failed;
  if (log && stopped == 0)
    log->info("sweep done in {}: {} point{} ran, {} failed, {} done before",
              format_duration(elapsed()), counts.done + counts.failed,
              counts.done + counts.failed == 1 ? "" : "s", counts.failed, counts.skipped);
  return report;
}

}  // namespace mnist
