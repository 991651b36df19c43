// The experiment's sections: name, seed, data, model, devices, train, optimizer, schedule, output,
// checkpoint. One table lists every section's keys (section_keys); each reader takes its
// section's row, reads each value through yaml_reader's checks and applies the rules that tie keys
// together (exactly one of steps / epochs, an engine of the chosen backend, min_lr <= lr). This
// file is the schema; the reading machinery is elsewhere.

#include "config/sections.hpp"

#include "config/keys.hpp"
#include "config/layer_kinds.hpp"
#include "config/run_dir.hpp"
#include "core/error.hpp"

namespace mnist::config_detail {

// The one list of each map's keys: the readers below open their sections with it, and
// config_keys() (experiment.hpp) reports it, so a key cannot be read without being listed.
const std::vector<SectionKeys>& section_keys() {
  static const std::vector<SectionKeys> table = {
      {"",
       {"name", "seed", "data", "model", "devices", "train", "optimizer", "schedule", "output",
        "checkpoint"}},
      {"data", {"dataset", "dir", "files", "validation_size", "random_shift"}},
      {"data.files", {"train_images", "train_labels", "test_images", "test_labels"}},
      {"model", {"input", "classes", "init", "batch_norm", "layers"}},
      {"model.init", init_keys()},
      {"model.batch_norm", batch_norm_keys()},
      {"devices", {"backend", "gpus", "engine", "cpu_workers", "threads"}},
      {"train",
       {"steps", "epochs", "batch_per_device", "global_batch", "log_every", "eval_every",
        "eval_batch", "batch_norm", "scale_lr_with_devices", "watchdog_seconds", "log_after_update",
        "cuda_graph", "keep_best", "patience"}},
      {"optimizer",
       {"type", "lr", "beta1", "beta2", "epsilon", "epsilon_style", "momentum", "nesterov",
        "weight_decay", "weight_decay_mode"}},
      {"schedule", {"type", "warmup_steps", "step_size", "gamma", "min_lr"}},
      {"output", {"dir", "log_format", "tensorboard"}},
      {"checkpoint", {"every", "keep"}},
  };
  return table;
}

const std::vector<std::string>& keys_of(const std::string& path) {
  for (const SectionKeys& row : section_keys()) {
    if (row.path == path) return row.keys;
  }
  MNIST_CHECK(false, "section '{}' has no row in the section table", path);
  return section_keys().front().keys;  // unreachable
}

namespace {

// Opens `key` of `parent` (whose path is parent.path()) with the keys its row lists.
Section open_section(const Section& parent, const std::string& key) {
  return parent.section(key, keys_of(parent.child(key)));
}

// Dataset names stay strings (data paths are built from them), read against this list.
const std::vector<Spelling<std::string>> kDatasets = {{"mnist", "mnist"},
                                                      {"mnist-small", "mnist-small"},
                                                      {"fashion-mnist", "fashion-mnist"},
                                                      {"custom", "custom"}};

const EngineSpelling& engine_row(Engine engine) {
  for (const EngineSpelling& row : spellings(Engine{})) {
    if (row.value == engine) return row;
  }
  MNIST_CHECK(false, "engine {} has no row in the engine table", static_cast<int>(engine));
  return spellings(Engine{}).front();  // unreachable
}

// "a", "a and b", "a, b and c"
std::string and_list(const std::vector<std::string>& items) {
  if (items.size() < 2) return join(items);
  return join(std::vector<std::string>(items.begin(), items.end() - 1)) + " and " + items.back();
}

ModelConfig parse_model(const Reporter& r, const Section& top) {
  ModelConfig model;
  if (!top.has("model")) r.fail_at(top.mark(), "model", "the 'model' section is required");
  Section s = open_section(top, "model");
  if (s.has("input")) {
    YAML::Node v = s.value("input");
    const std::string rule = fmt::format(
        "must be a list of three integers [channels, height, width], each in [1, {}]", kMaxSizeKey);
    if (!v.IsSequence() || v.size() != 3) r.fail_value(v, s.child("input"), rule);
    int* dims[3] = {&model.input_c, &model.input_h, &model.input_w};
    for (size_t i = 0; i < 3; ++i) {
      *dims[i] = static_cast<int>(
          read_integer(r, v[i], fmt::format("{}[{}]", s.child("input"), i), 1, kMaxSizeKey));
    }
  }
  s.integer("classes", model.classes, 2, 255);  // labels are stored as bytes
  ModelDefaults defaults;
  if (s.has("init")) defaults.init = parse_init(r, s.value("init"), s.child("init"), defaults.init);
  parse_batch_norm_options(open_section(s, "batch_norm"), defaults.batch_norm);
  parse_layers(r, s, defaults, model.layers);
  return model;
}

// ---- the other sections -------------------------------------------------------------------------

DataConfig parse_data(const Reporter& r, const Section& top) {
  DataConfig data;
  Section s = open_section(top, "data");
  s.choice_among("dataset", data.dataset, kDatasets);
  s.text("dir", data.dir);
  s.integer("validation_size", data.validation_size, 0);
  s.integer("random_shift", data.random_shift, 0, 8);
  Section files = open_section(s, "files");
  files.text("train_images", data.train_images);
  files.text("train_labels", data.train_labels);
  files.text("test_images", data.test_images);
  files.text("test_labels", data.test_labels);
  bool all_files = !data.train_images.empty() && !data.train_labels.empty() &&
                   !data.test_images.empty() && !data.test_labels.empty();
  if (data.dataset == "custom" && data.dir.empty() && !all_files) {
    r.fail_at(s.mark(), s.path(),
              "dataset 'custom' needs 'dir' or all four of files.train_images, "
              "files.train_labels, files.test_images, files.test_labels");
  }
  if (data.dir.empty()) data.dir = "data/" + data.dataset;
  return data;
}

DevicesConfig parse_devices(const Reporter& r, const Section& top) {
  DevicesConfig dev;
  Section s = open_section(top, "devices");
  s.choice("backend", dev.backend);
  s.choice("engine", dev.engine);
  s.integer("cpu_workers", dev.cpu_workers, 1, 1024);
  s.integer("threads", dev.threads, 0, 4096);
  if (s.has("gpus")) {
    YAML::Node v = s.value("gpus");
    std::string path = s.child("gpus");
    const std::string auto_prefix = std::string(to_string(GpuSelection::auto_count)) + ":";
    const char* rule =
        "must be 'all', a list of GPU ordinals >= 0 like [0, 1] (repeat one to run several "
        "workers on it), or 'auto:N' with N >= 1 (the N GPUs with most free memory)";
    if (v.IsSequence()) {
      if (v.size() == 0) r.fail_value(v, path, rule);
      dev.gpus_mode = GpuSelection::list;
      for (size_t i = 0; i < v.size(); ++i) {
        dev.gpu_list.push_back(
            static_cast<int>(read_integer(r, v[i], fmt::format("{}[{}]", path, i), 0, 1023)));
      }
    } else if (v.IsScalar() && v.Scalar() == to_string(GpuSelection::all)) {
      dev.gpus_mode = GpuSelection::all;
    } else if (v.IsScalar() && v.Scalar().rfind(auto_prefix, 0) == 0) {
      std::string n = v.Scalar().substr(auto_prefix.size());
      if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(n) < 1) {
        r.fail_value(v, path, rule);
      }
      dev.gpus_mode = GpuSelection::auto_count;
      dev.gpus_auto_count = std::stoi(n);
    } else {
      r.fail_value(v, path, rule);
    }
  }
  // The engine's row says which backends run it; backend auto is checked by the device plan.
  const EngineSpelling& engine = engine_row(dev.engine);
  std::vector<std::string> cuda_only;
  for (const EngineSpelling& row : spellings(Engine{})) {
    if (row.cuda && !row.cpu) cuda_only.push_back(row.name);
  }
  if (dev.backend == BackendChoice::cpu && !engine.cpu) {
    r.fail(s.value("engine"), s.child("engine"),
           fmt::format("'{}' is not allowed with backend cpu: the {} engines need the cuda backend "
                       "(CPU engines: {})",
                       engine.name, and_list(cuda_only),
                       engine_names(engines_of(BackendChoice::cpu))));
  }
  if (dev.backend == BackendChoice::cuda && !engine.cuda) {
    r.fail(
        s.value("engine"), s.child("engine"),
        fmt::format("'{}' is not allowed with backend cuda: it is a CPU engine (CUDA engines: {})",
                    engine.name, engine_names(engines_of(BackendChoice::cuda))));
  }
  return dev;
}

TrainConfig parse_train(const Reporter& r, const Section& top, const DataConfig& data) {
  TrainConfig t;
  if (!top.has("train")) {
    r.fail_at(top.mark(), "train",
              "the 'train' section is required (one of steps/epochs and one of "
              "batch_per_device/global_batch)");
  }
  Section s = open_section(top, "train");
  s.exactly_one("steps", "epochs");
  s.exactly_one("batch_per_device", "global_batch");
  s.integer("steps", t.steps, 1);
  s.number("epochs", t.epochs, above(0));
  s.integer("batch_per_device", t.batch_per_device, 1);
  s.integer("global_batch", t.global_batch, 1);
  s.integer("log_every", t.log_every, 1);
  s.integer("eval_every", t.eval_every, 0);
  s.integer("eval_batch", t.eval_batch, 1);
  s.choice("batch_norm", t.batch_norm);
  s.boolean("scale_lr_with_devices", t.scale_lr_with_devices);
  s.number("watchdog_seconds", t.watchdog_seconds, above(0));
  s.boolean("log_after_update", t.log_after_update);
  s.boolean("cuda_graph", t.cuda_graph);
  // The best checkpoint and early stopping judge the validation split: without one there is
  // nothing to judge (the evaluations are of the test set, which must not choose anything).
  const bool validation = data.validation_size > 0;
  t.keep_best = validation ? KeepBest::validation_accuracy : KeepBest::none;
  s.choice("keep_best", t.keep_best);
  if (!validation && t.keep_best != KeepBest::none)
    r.fail_value(s.value("keep_best"), s.child("keep_best"),
                 "a validation metric needs a validation split: set data.validation_size > 0 "
                 "(without one the evaluations are of the test set, and no best is kept), or "
                 "keep_best: none");
  s.integer("patience", t.patience, 0);
  if (t.patience > 0) {
    std::string missing;
    if (!validation)
      missing = "a validation split (data.validation_size > 0)";
    else if (t.eval_every == 0)
      missing = "evaluations during training (train.eval_every > 0; patience counts them)";
    else if (t.keep_best == KeepBest::none)
      missing = "a metric to watch (train.keep_best: validation_accuracy or validation_loss)";
    if (!missing.empty())
      r.fail_value(s.value("patience"), s.child("patience"),
                   "early stopping needs " + missing + "; 0 turns it off");
  }
  return t;
}

OptimizerConfig parse_optimizer(const Section& top) {
  OptimizerConfig o;
  Section s = open_section(top, "optimizer");
  s.choice("type", o.kind);
  if (o.kind == OptimizerKind::adam) {
    s.forbid({"momentum", "nesterov"}, "with type adam (it is an sgd option)");
  } else {
    s.forbid({"beta1", "beta2", "epsilon", "epsilon_style"},
             "with type sgd (it is an adam option)");
  }
  s.number("lr", o.lr, above(0));
  s.number("beta1", o.beta1, half_open(0, 1));
  s.number("beta2", o.beta2, half_open(0, 1));
  s.number("epsilon", o.epsilon, above(0));
  s.choice("epsilon_style", o.epsilon_style);
  s.number("momentum", o.momentum, half_open(0, 1));
  s.boolean("nesterov", o.nesterov);
  if (o.nesterov && o.momentum == 0) {
    s.reporter().fail(s.value("nesterov"), s.child("nesterov"),
                      "true is not allowed with momentum 0: Nesterov needs momentum > 0");
  }
  s.number("weight_decay", o.weight_decay, at_least(0));
  s.choice("weight_decay_mode", o.weight_decay_mode);
  return o;
}

ScheduleConfig parse_schedule(const Section& top, const OptimizerConfig& opt) {
  ScheduleConfig sc;
  Section s = open_section(top, "schedule");
  s.choice("type", sc.kind);
  const std::string type = to_string(sc.kind);
  if (sc.kind != ScheduleKind::step) {
    s.forbid({"step_size", "gamma"}, fmt::format("with type {} (it is a step option)", type));
  }
  if (sc.kind != ScheduleKind::cosine) {
    s.forbid({"min_lr"}, fmt::format("with type {} (it is a cosine option)", type));
  }
  s.integer("warmup_steps", sc.warmup_steps, 0);
  s.integer("step_size", sc.step_size, 1);
  s.number("gamma", sc.gamma, Range{0, true, 1, false});
  s.number("min_lr", sc.min_lr, at_least(0));
  if (sc.min_lr > opt.lr) {
    s.reporter().fail_value(s.value("min_lr"), s.child("min_lr"),
                            fmt::format("must be <= optimizer.lr ({}): cosine decays from lr "
                                        "down to min_lr",
                                        opt.lr));
  }
  return sc;
}

}  // namespace

Experiment build_experiment(const Reporter& r, const YAML::Node& root) {
  if (!root.IsMap()) {
    r.fail_value(root, "",
                 "a config file is a map with sections name, data, model, devices, "
                 "train, optimizer, ...");
  }
  Section top(r, root, "", keys_of(""));
  Experiment e;
  top.text("name", e.name);
  if (e.name.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
      std::string::npos) {
    r.fail_value(top.value("name"), "name",
                 "must use only letters, digits, '.', '_' and '-' (it names the run directory)");
  }
  top.integer("seed", e.seed, 0);
  e.data = parse_data(r, top);
  e.model = parse_model(r, top);
  e.devices = parse_devices(r, top);
  e.train = parse_train(r, top, e.data);
  e.optimizer = parse_optimizer(top);
  e.schedule = parse_schedule(top, e.optimizer);
  Section out = open_section(top, "output");
  out.text("dir", e.output.dir);
  // Checked here, with the key's line; filled in when a run starts (config/run_dir.hpp).
  if (const std::string rule = run_dir_template_error(e.output.dir); !rule.empty())
    r.fail_value(out.value("dir"), "output.dir", rule);
  out.choice("log_format", e.output.log_format);
  out.boolean("tensorboard", e.output.tensorboard);
  if (e.output.dir.empty()) e.output.dir = "runs/" + e.name;
  Section ck = open_section(top, "checkpoint");
  ck.integer("every", e.checkpoint.every, 0);
  ck.integer("keep", e.checkpoint.keep, 1);
  return e;
}

}  // namespace mnist::config_detail

namespace mnist {

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  for (const config_detail::SectionKeys& row : config_detail::section_keys()) {
    for (const std::string& key : row.keys)
      keys.push_back(row.path.empty() ? key : row.path + "." + key);
  }
  for (std::string& key : config_detail::layer_keys()) keys.push_back(std::move(key));
  return keys;
}

}  // namespace mnist
