#include "sweep/plan.hpp"

#include <filesystem>

#include "config/data_root.hpp"
#include "core/error.hpp"
#include "core/fnv1a.hpp"
#include "core/host_memory.hpp"
#include "model/model.hpp"
#include "train/run_memory.hpp"

namespace mnist {

namespace {

// The last part of a key path, for folder names: "optimizer.lr" -> "lr",
// "model.layers[5].dense.units" -> "units".
std::string short_key(const std::string& key) {
  const std::size_t dot = key.find_last_of('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

std::string path_safe(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '=' || c == '-';
    out += ok ? c : '_';
  }
  return out;
}

// The bytes of pixels and labels of a named dataset (train + test), for the memory check of
// points at once; 0 for a custom one, whose size is known only once read.
uint64_t dataset_bytes(const DataConfig& data) {
  const uint64_t image = 785;  // 28 x 28 pixels and a label
  if (data.dataset == "mnist" || data.dataset == "fashion-mnist") return 70000 * image;
  if (data.dataset == "mnist-small") return 10000 * image;
  return 0;
}

}  // namespace

std::string PlannedPoint::run_dir(const std::string& sweep_dir) const {
  return (std::filesystem::path(sweep_dir) / "points" / name).string();
}
std::string PlannedPoint::log_path(const std::string& sweep_dir) const {
  return (std::filesystem::path(sweep_dir) / "logs" / (name + ".log")).string();
}
std::string PlannedPoint::status_path(const std::string& sweep_dir) const {
  return (std::filesystem::path(sweep_dir) / "logs" / (name + ".json")).string();
}

std::string point_folder_name(const SweepPoint& point, const std::string& hash, int points) {
  const int width = static_cast<int>(std::to_string(std::max(points - 1, 0)).size());
  std::string settings;
  for (const SweepSetting& s : point.settings)
    settings += "-" + path_safe(short_key(s.key) + "=" + s.value);
  if (point.seed) settings += fmt::format("-seed={}", *point.seed);
  // Names stay well below NAME_MAX (255) however many settings a point has.
  if (settings.size() > 120) settings = settings.substr(0, 120);
  return fmt::format("{:0{}}{}-{}", point.index, width, settings, hash);
}

std::string sweep_config_hash(const Experiment& experiment) {
  Experiment e = experiment;
  const DevicesConfig defaults;
  e.devices.threads = defaults.threads;
  e.devices.gpus_mode = defaults.gpus_mode;
  e.devices.gpu_list.clear();
  e.devices.gpus_auto_count = 0;
  e.output.dir.clear();
  return fmt::format("{:08x}", static_cast<uint32_t>(fnv1a(to_yaml(e)) >> 32));
}

Experiment load_base_experiment(const SweepSpec& spec, const std::string& data_root) {
  if (spec.config_path.empty())
    MNIST_THROW(UsageError, "a sweep needs a base config: --config FILE (or sweep.config)");
  Experiment base = load_experiment(spec.config_path, spec.overrides, spec.unsets);
  apply_data_root(base.data, data_root);
  return base;
}

std::string sweep_dir(const SweepSpec& spec, const Experiment& base) {
  return spec.out_dir.empty() ? "runs/" + base.name + "-sweep" : spec.out_dir;
}

std::string axis_named_by(const SweepPoint& point, const std::string& message) {
  for (const SweepSetting& s : point.settings)
    if (message.find("--set '" + s.text() + "'") != std::string::npos) return s.key;
  if (point.seed && message.find(fmt::format("--set 'seed={}'", *point.seed)) != std::string::npos)
    return "seed";
  // A message about the key without the --set text (an unknown key, say).
  for (const SweepSetting& s : point.settings)
    if (message.find(s.key) != std::string::npos) return s.key;
  return "";
}

std::vector<PlannedPoint> plan_points(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                                      const std::vector<std::string>& placement,
                                      const std::string& data_root, int concurrent) {
  std::vector<PlannedPoint> planned;
  int failing = 0;
  std::string first_error;
  for (const SweepPoint& point : points) {
    std::vector<std::string> overrides = spec.overrides;
    for (const std::string& o : point.overrides()) overrides.push_back(o);
    for (const std::string& o : placement) overrides.push_back(o);
    try {
      PlannedPoint p;
      p.point = point;
      p.experiment = load_experiment(spec.config_path, overrides, spec.unsets);
      p.hash = sweep_config_hash(p.experiment);
      p.name = point_folder_name(point, p.hash, static_cast<int>(points.size()));
      apply_data_root(p.experiment.data, data_root);
      const Model model = Model::build(p.experiment.model);
      const TrainConfig& t = p.experiment.train;
      const bool gpu = p.experiment.devices.backend == BackendChoice::cuda;
      p.replicas = gpu ? 1 : p.experiment.devices.cpu_workers;
      const int64_t global = t.global_batch > 0
                                 ? t.global_batch
                                 : static_cast<int64_t>(t.batch_per_device) * p.replicas;
      const int64_t slice = std::max<int64_t>((global + p.replicas - 1) / p.replicas, t.eval_batch);
      const std::string key = t.global_batch > 0 ? "train.global_batch" : "train.batch_per_device";
      std::vector<MemoryTerm> terms = replica_memory(model, slice, key);
      for (const MemoryTerm& term : terms) p.replica_bytes += term.bytes;
      if (!gpu) {
        terms.push_back({"data.dir", dataset_bytes(p.experiment.data)});
        check_host_memory(
            terms, static_cast<int64_t>(p.replicas) * std::max(concurrent, 1),
            available_host_bytes(),
            fmt::format("{} point{} at once, each with {} replica{}", concurrent,
                        concurrent == 1 ? "" : "s", p.replicas, p.replicas == 1 ? "" : "s"));
      }
      p.dataset_bytes = dataset_bytes(p.experiment.data);
      planned.push_back(std::move(p));
    } catch (const ConfigError& e) {
      if (failing++ > 0) continue;
      const std::string axis = axis_named_by(point, e.what());
      std::string value;
      for (const SweepSetting& s : point.settings)
        if (s.key == axis) value = s.value;
      if (axis == "seed" && point.seed) value = std::to_string(*point.seed);
      first_error = fmt::format("sweep point {} ({}): {}: {}", point.index, point.label(),
                                axis.empty() ? std::string("the combination of its settings")
                                             : fmt::format("axis {}, value '{}'", axis, value),
                                e.what());
    }
  }
  if (failing > 0)
    MNIST_THROW(ConfigError, "{}{}; nothing was started", first_error,
                failing > 1 ? fmt::format(" ({} of the {} points fail)", failing, points.size())
                            : std::string());
  return planned;
}

}  // namespace mnist
