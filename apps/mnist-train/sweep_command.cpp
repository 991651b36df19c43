#include "sweep_command.hpp"

#include <filesystem>
#include <iostream>

#include "core/error.hpp"

namespace mnist_cli {

void add_sweep_subcommand(CLI::App& app, SweepOptions& options) {
  CLI::App* sweep = options.app = app.add_subcommand(
      "sweep",
      "run many points of one config (a grid of settings, groups, seeds), each as its own "
      "process, on the GPUs or the CPU cores, and write one table of their results");
  sweep
      ->add_option("--sweep", options.file,
                   "a sweep file (YAML, key 'sweep': config, grid, list, seeds, set, out)")
      ->check(CLI::ExistingFile);
  sweep
      ->add_option("--grid", options.grid,
                   "an axis of the grid: KEY=V1,V2,... (repeat for more axes; values are YAML, "
                   "commas inside [...] stay)")
      ->type_name("KEY=V1,V2");
  sweep
      ->add_option("--list", options.list,
                   "one explicit group of settings: KEY=V,KEY=V (repeat for more groups; each is "
                   "crossed with the grid)")
      ->type_name("KEY=V,KEY=V");
  sweep->add_option("--seeds", options.seeds, "run every point once per seed: 1,2,3 or 1-5");
  sweep->add_option("--out", options.out, "the sweep's folder (default: runs/<config name>-sweep)");
  sweep
      ->add_option("--slots", options.slots,
                   "points at once on the CPU, which share its cores (devices.threads); "
                   "default 1")
      ->check(CLI::PositiveNumber);
  sweep
      ->add_option("--per-gpu", options.per_gpu,
                   "points at once on each GPU of --gpus (refused when they would not fit its "
                   "free memory)")
      ->check(CLI::PositiveNumber);
  sweep
      ->add_option("--point", options.point,
                   "run only point K (0-based, as --dry-run numbers them): one task of a Slurm "
                   "array; exits with the point's own code")
      ->check(CLI::NonNegativeNumber);
  sweep->add_flag("--collect", options.collect,
                  "start nothing: gather the table from the points' folders (after an array job)");
}

mnist::SweepReport run_sweep_command(const SweepOptions& options, const SweepContext& context) {
  mnist::SweepRequest request;
  if (!options.file.empty()) request.spec = mnist::read_sweep_file(options.file);
  mnist::SweepSpec& spec = request.spec;
  if (!context.config_path.empty()) spec.config_path = context.config_path;
  // The command line's settings come after the file's, so they win where both set a key.
  spec.overrides.insert(spec.overrides.end(), context.overrides.begin(), context.overrides.end());
  spec.unsets.insert(spec.unsets.end(), context.unsets.begin(), context.unsets.end());
  for (const std::string& g : options.grid) spec.grid.push_back(mnist::parse_grid_option(g));
  for (std::size_t i = 0; i < options.list.size(); ++i)
    spec.groups.push_back(mnist::parse_list_option(options.list[i], static_cast<int>(i) + 1));
  if (!options.seeds.empty()) spec.seeds = mnist::parse_seeds_option(options.seeds);
  if (!options.out.empty()) spec.out_dir = options.out;
  if (spec.config_path.empty())
    MNIST_THROW(mnist::UsageError,
                "sweep needs a base config: --config FILE or a sweep file's "
                "sweep.config (see --help)");
  if (options.collect && options.point >= 0)
    MNIST_THROW(mnist::UsageError, "sweep: --collect gathers every point; leave out --point");

  // The points run this very binary, whatever the working directory or PATH say.
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec)
    MNIST_THROW(mnist::RuntimeError, "sweep: cannot find this program's path (/proc/self/exe: {})",
                ec.message());
  request.exe = self.string();
  request.data_root = context.data_root;
  request.data_root_option = context.data_root_option;
  request.gpus = context.gpus;
  request.per_gpu = options.per_gpu;
  request.slots = options.slots;
  if (options.point >= 0) request.point = options.point;
  request.dry_run = context.dry_run;
  request.collect = options.collect;
  request.point_args = context.point_args;

  mnist::SweepHooks hooks;
  hooks.stop_signal = context.stop_signal;
  hooks.log = context.log;
  hooks.status = context.status;
  hooks.out = &std::cout;
  return mnist::run_sweep(request, hooks);
}

}  // namespace mnist_cli
