// to_yaml: the resolved experiment written back as YAML, every key explicit, defaults included.
// It is what --dry-run prints and what the run directory keeps as config.yaml, and it reads back to
// the same experiment (a unit test holds it to that). Enum words come from spellings.hpp's tables
// and layer options from the layer-kind rows, the same sources the reader and the math config use.

#include <yaml-cpp/yaml.h>

#include "config/experiment.hpp"
#include "config/layer_kinds.hpp"
#include "core/error.hpp"

namespace mnist {
namespace {

// Shortest text that reads back as the same value ({} is fmt's round-trip format).
template <class T>
std::string num(T v) {
  return fmt::format("{}", v);
}
const char* boolean(bool b) {
  return b ? "true" : "false";
}

// `- kind: {option: value, ..., init: {type: ..., ...}}`: the row's options in order; a dotted
// option key opens a nested flow map for its prefix.
void emit_layer(YAML::Emitter& y, const LayerSpec& l) {
  y << YAML::BeginMap << YAML::Key << to_string(l.kind) << YAML::Value << YAML::Flow
    << YAML::BeginMap;
  std::string group;  // the nested map open now ("init"), "" for none
  for (const config_detail::LayerOption& option : config_detail::layer_kind(l.kind).options) {
    const std::optional<std::string> text = option.text(l);
    if (!text) continue;
    const std::string key = option.key;
    const std::size_t dot = key.find('.');
    const std::string prefix = dot == std::string::npos ? "" : key.substr(0, dot);
    if (prefix != group) {
      if (!group.empty()) y << YAML::EndMap;
      if (!prefix.empty()) y << YAML::Key << prefix << YAML::Value << YAML::Flow << YAML::BeginMap;
      group = prefix;
    }
    y << YAML::Key << (dot == std::string::npos ? key : key.substr(dot + 1)) << YAML::Value
      << *text;
  }
  if (!group.empty()) y << YAML::EndMap;
  y << YAML::EndMap << YAML::EndMap;
}

}  // namespace

std::string to_yaml(const Experiment& e) {
  YAML::Emitter y;
  y << YAML::BeginMap;
  y << YAML::Key << "name" << YAML::Value << e.name;
  y << YAML::Key << "seed" << YAML::Value << e.seed;

  y << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "dataset" << YAML::Value << e.data.dataset;
  y << YAML::Key << "dir" << YAML::Value << e.data.dir;
  const std::pair<const char*, const std::string*> files[] = {
      {"train_images", &e.data.train_images},
      {"train_labels", &e.data.train_labels},
      {"test_images", &e.data.test_images},
      {"test_labels", &e.data.test_labels}};
  bool any_file = false;
  for (const auto& f : files) any_file = any_file || !f.second->empty();
  if (any_file) {  // unset paths are derived from dir, so only set ones are written
    y << YAML::Key << "files" << YAML::Value << YAML::BeginMap;
    for (const auto& f : files) {
      if (!f.second->empty()) y << YAML::Key << f.first << YAML::Value << *f.second;
    }
    y << YAML::EndMap;
  }
  y << YAML::Key << "validation_size" << YAML::Value << e.data.validation_size;
  y << YAML::Key << "random_shift" << YAML::Value << e.data.random_shift;
  y << YAML::EndMap;

  // Layers are written expanded (batch_norm / relu as their own items, every option explicit), so
  // the file reads back to the same list whatever model-wide defaults the original used.
  y << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "input" << YAML::Value << YAML::Flow << YAML::BeginSeq << e.model.input_c
    << e.model.input_h << e.model.input_w << YAML::EndSeq;
  y << YAML::Key << "classes" << YAML::Value << e.model.classes;
  y << YAML::Key << "layers" << YAML::Value << YAML::BeginSeq;
  for (const auto& l : e.model.layers) emit_layer(y, l);
  y << YAML::EndSeq << YAML::EndMap;

  const DevicesConfig& d = e.devices;
  y << YAML::Key << "devices" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "backend" << YAML::Value << to_string(d.backend);
  y << YAML::Key << "gpus" << YAML::Value;
  switch (d.gpus_mode) {
    case GpuSelection::list:
      y << YAML::Flow << YAML::BeginSeq;
      for (int g : d.gpu_list) y << g;
      y << YAML::EndSeq;
      break;
    case GpuSelection::auto_count:
      y << fmt::format("{}:{}", to_string(d.gpus_mode), d.gpus_auto_count);
      break;
    case GpuSelection::all:
      y << to_string(d.gpus_mode);
      break;
  }
  y << YAML::Key << "engine" << YAML::Value << to_string(d.engine);
  y << YAML::Key << "cpu_workers" << YAML::Value << d.cpu_workers;
  y << YAML::Key << "threads" << YAML::Value << d.threads;
  y << YAML::EndMap;

  const TrainConfig& t = e.train;
  y << YAML::Key << "train" << YAML::Value << YAML::BeginMap;
  if (t.steps > 0) {
    y << YAML::Key << "steps" << YAML::Value << t.steps;
  } else {
    y << YAML::Key << "epochs" << YAML::Value << num(t.epochs);
  }
  if (t.batch_per_device > 0) {
    y << YAML::Key << "batch_per_device" << YAML::Value << t.batch_per_device;
  } else {
    y << YAML::Key << "global_batch" << YAML::Value << t.global_batch;
  }
  y << YAML::Key << "log_every" << YAML::Value << t.log_every;
  y << YAML::Key << "eval_every" << YAML::Value << t.eval_every;
  y << YAML::Key << "eval_batch" << YAML::Value << t.eval_batch;
  y << YAML::Key << "batch_norm" << YAML::Value << to_string(t.batch_norm);
  y << YAML::Key << "scale_lr_with_devices" << YAML::Value << boolean(t.scale_lr_with_devices);
  y << YAML::Key << "watchdog_seconds" << YAML::Value << num(t.watchdog_seconds);
  y << YAML::Key << "log_after_update" << YAML::Value << boolean(t.log_after_update);
  y << YAML::Key << "cuda_graph" << YAML::Value << boolean(t.cuda_graph);
  y << YAML::Key << "keep_best" << YAML::Value << to_string(t.keep_best);
  y << YAML::Key << "patience" << YAML::Value << t.patience;
  y << YAML::EndMap;

  const OptimizerConfig& o = e.optimizer;
  y << YAML::Key << "optimizer" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "type" << YAML::Value << to_string(o.kind);
  y << YAML::Key << "lr" << YAML::Value << num(o.lr);
  if (o.kind == OptimizerKind::adam) {
    y << YAML::Key << "beta1" << YAML::Value << num(o.beta1);
    y << YAML::Key << "beta2" << YAML::Value << num(o.beta2);
    y << YAML::Key << "epsilon" << YAML::Value << num(o.epsilon);
    y << YAML::Key << "epsilon_style" << YAML::Value << to_string(o.epsilon_style);
  } else {
    y << YAML::Key << "momentum" << YAML::Value << num(o.momentum);
    y << YAML::Key << "nesterov" << YAML::Value << boolean(o.nesterov);
  }
  y << YAML::Key << "weight_decay" << YAML::Value << num(o.weight_decay);
  y << YAML::Key << "weight_decay_mode" << YAML::Value << to_string(o.weight_decay_mode);
  y << YAML::EndMap;

  const ScheduleConfig& s = e.schedule;
  y << YAML::Key << "schedule" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "type" << YAML::Value << to_string(s.kind);
  y << YAML::Key << "warmup_steps" << YAML::Value << s.warmup_steps;
  if (s.kind == ScheduleKind::step) {
    y << YAML::Key << "step_size" << YAML::Value << s.step_size;
    y << YAML::Key << "gamma" << YAML::Value << num(s.gamma);
  }
  if (s.kind == ScheduleKind::cosine) y << YAML::Key << "min_lr" << YAML::Value << num(s.min_lr);
  y << YAML::EndMap;

  y << YAML::Key << "output" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "dir" << YAML::Value << e.output.dir;
  y << YAML::Key << "log_format" << YAML::Value << to_string(e.output.log_format);
  y << YAML::Key << "tensorboard" << YAML::Value << e.output.tensorboard;
  y << YAML::EndMap;

  y << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "every" << YAML::Value << e.checkpoint.every;
  y << YAML::Key << "keep" << YAML::Value << e.checkpoint.keep;
  y << YAML::EndMap;

  y << YAML::EndMap;
  MNIST_CHECK(y.good(), "emitting the resolved config failed: {}", y.GetLastError());
  return std::string(y.c_str()) + "\n";
}

}  // namespace mnist
