// The config layer: broken files are rejected with messages that point at the file, line:column (or
// the --set text), YAML path, value and rule; defaults, overrides and the layer shorthand resolve
// as documented; to_yaml reads back to the same experiment; every shipped config loads.

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "core/error.hpp"
#include "core/printable.hpp"

using namespace mnist;
using Catch::Matchers::Contains;

namespace {

// The message of the ConfigError that parsing throws ("" if it does not throw one).
std::string config_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_experiment(yaml, "broken.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Smallest valid config; cases below that need it write it out so line numbers stay visible.
const char* kMinimal = R"(name: tiny
model:
  layers:
    - conv2d: {filters: 6, kernel: 5}
    - flatten: {}
    - dense: {units: 10}
train:
  steps: 10
  batch_per_device: 8
)";

std::vector<std::string> kinds(const Experiment& e) {
  std::vector<std::string> out;
  for (const auto& l : e.model.layers) out.push_back(to_string(l.kind));
  return out;
}

// Field-by-field equality of what training depends on (yaml_path/yaml_line and source_path are
// provenance, not meaning, and are left out).
void require_same(const Experiment& a, const Experiment& b) {
  CHECK(a.name == b.name);
  CHECK(a.seed == b.seed);
  CHECK(a.data.dataset == b.data.dataset);
  CHECK(a.data.dir == b.data.dir);
  CHECK(a.data.train_images == b.data.train_images);
  CHECK(a.data.train_labels == b.data.train_labels);
  CHECK(a.data.test_images == b.data.test_images);
  CHECK(a.data.test_labels == b.data.test_labels);
  CHECK(a.data.validation_size == b.data.validation_size);
  CHECK(a.data.random_shift == b.data.random_shift);
  CHECK(a.model.input_c == b.model.input_c);
  CHECK(a.model.input_h == b.model.input_h);
  CHECK(a.model.input_w == b.model.input_w);
  CHECK(a.model.classes == b.model.classes);
  REQUIRE(a.model.layers.size() == b.model.layers.size());
  for (size_t i = 0; i < a.model.layers.size(); ++i) {
    INFO("layer " << i);
    const LayerSpec& x = a.model.layers[i];
    const LayerSpec& y = b.model.layers[i];
    CHECK(x.kind == y.kind);
    CHECK(x.filters == y.filters);
    CHECK(x.units == y.units);
    CHECK(x.kernel == y.kernel);
    CHECK(x.stride == y.stride);
    CHECK(x.padding == y.padding);
    CHECK(x.padding_pixels == y.padding_pixels);
    CHECK(x.bias == y.bias);
    if (x.kind == LayerKind::conv2d || x.kind == LayerKind::dense) {  // the layers with weights
      CHECK(x.init.kind == y.init.kind);
      CHECK(x.init.mean == y.init.mean);
      CHECK(x.init.stddev == y.init.stddev);
    }
    CHECK(x.pool_size == y.pool_size);
    CHECK(x.decay == y.decay);
    CHECK(x.epsilon == y.epsilon);
    CHECK(x.center == y.center);
    CHECK(x.scale == y.scale);
    CHECK(x.rate == y.rate);
  }
  CHECK(a.devices.backend == b.devices.backend);
  CHECK(a.devices.gpus_mode == b.devices.gpus_mode);
  CHECK(a.devices.gpu_list == b.devices.gpu_list);
  CHECK(a.devices.gpus_auto_count == b.devices.gpus_auto_count);
  CHECK(a.devices.engine == b.devices.engine);
  CHECK(a.devices.cpu_workers == b.devices.cpu_workers);
  CHECK(a.devices.threads == b.devices.threads);
  CHECK(a.train.steps == b.train.steps);
  CHECK(a.train.epochs == b.train.epochs);
  CHECK(a.train.batch_per_device == b.train.batch_per_device);
  CHECK(a.train.global_batch == b.train.global_batch);
  CHECK(a.train.log_every == b.train.log_every);
  CHECK(a.train.eval_every == b.train.eval_every);
  CHECK(a.train.eval_batch == b.train.eval_batch);
  CHECK(a.train.batch_norm == b.train.batch_norm);
  CHECK(a.train.scale_lr_with_devices == b.train.scale_lr_with_devices);
  CHECK(a.train.watchdog_seconds == b.train.watchdog_seconds);
  CHECK(a.optimizer.kind == b.optimizer.kind);
  CHECK(a.optimizer.lr == b.optimizer.lr);
  CHECK(a.optimizer.beta1 == b.optimizer.beta1);
  CHECK(a.optimizer.beta2 == b.optimizer.beta2);
  CHECK(a.optimizer.epsilon == b.optimizer.epsilon);
  CHECK(a.optimizer.epsilon_style == b.optimizer.epsilon_style);
  CHECK(a.train.log_after_update == b.train.log_after_update);
  CHECK(a.train.keep_best == b.train.keep_best);
  CHECK(a.train.patience == b.train.patience);
  CHECK(a.optimizer.momentum == b.optimizer.momentum);
  CHECK(a.optimizer.nesterov == b.optimizer.nesterov);
  CHECK(a.optimizer.weight_decay == b.optimizer.weight_decay);
  CHECK(a.optimizer.weight_decay_mode == b.optimizer.weight_decay_mode);
  CHECK(a.schedule.kind == b.schedule.kind);
  CHECK(a.schedule.warmup_steps == b.schedule.warmup_steps);
  CHECK(a.schedule.step_size == b.schedule.step_size);
  CHECK(a.schedule.gamma == b.schedule.gamma);
  CHECK(a.schedule.min_lr == b.schedule.min_lr);
  CHECK(a.output.dir == b.output.dir);
  CHECK(a.output.log_format == b.output.log_format);
  CHECK(a.checkpoint.every == b.checkpoint.every);
  CHECK(a.checkpoint.keep == b.checkpoint.keep);
}

struct BrokenCase {
  const char* what;
  const char* yaml;
  std::vector<std::string> overrides;
  std::vector<std::string> expected;  // substrings of the message, location and path included
};

}  // namespace

TEST_CASE("broken configs are rejected with file, line:column, YAML path, value and rule",
          "[config]") {
  const std::vector<BrokenCase> cases = {
      {"unknown top-level key, with a hint and the known keys",
       R"(name: t
trian: {steps: 10}
model:
  layers: [dense: {units: 10}]
)",
       {},
       {"broken.yaml:2:1: trian: unknown key 'trian' at the top level; did you mean 'train'?",
        "known keys: name, seed, data, model, devices, train, optimizer, schedule, output, "
        "checkpoint"}},
      {"unknown key far from every known one: no hint",
       R"(name: t
zzzzzzzz: 1
)",
       {},
       {"broken.yaml:2:1: zzzzzzzz: unknown key 'zzzzzzzz' at the top level; known keys: name"}},
      {"misspelled layer kind",
       R"(model:
  layers:
    - conv2d: {filters: 6, kernel: 5}
    - rleu: {}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:4:7: model.layers[1]: unknown layer 'rleu'; did you mean 'relu'? known: "
        "conv2d, max_pool, batch_norm, relu, dense, dropout, flatten"}},
      {"negative filters",
       R"(model:
  layers:
    - conv2d: {filters: -4, kernel: 5}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:25: model.layers[0].conv2d.filters: -4 is not allowed: must be an "
        "integer in [1, 1048576]"}},
      {"string where an integer belongs",
       R"(model:
  layers:
    - conv2d:
        filters: six
        kernel: 5
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:4:18: model.layers[0].conv2d.filters: 'six' is not allowed: must be an "
        "integer in [1, 1048576]"}},
      {"quoted number is a string, not an integer",
       R"(model:
  layers: [dense: {units: 10}]
train:
  steps: "10"
  batch_per_device: 8
)",
       {},
       {"broken.yaml:4:10: train.steps: '10' is not allowed: must be an integer >= 1"}},
      {"fractional integer",
       R"(model:
  layers: [dense: {units: 10}]
train:
  steps: 10
  batch_per_device: 8.5
)",
       {},
       {"broken.yaml:5:21: train.batch_per_device: 8.5 is not allowed: must be an integer >= 1"}},
      {"unknown layer option, with a hint",
       R"(model:
  layers:
    - conv2d: {filters: 6, kernal: 5}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:28: model.layers[0].conv2d.kernal: unknown key 'kernal' in "
        "model.layers[0].conv2d; did you mean 'kernel'? known keys: filters, kernel, stride"}},
      {"missing required option",
       R"(model:
  layers:
    - conv2d: {filters: 6}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:15: model.layers[0].conv2d: 'kernel' is required"}},
      {"both steps and epochs",
       R"(model:
  layers: [dense: {units: 10}]
train:
  steps: 10
  epochs: 2
  batch_per_device: 8
)",
       {},
       {"broken.yaml:5:3: train: give exactly one of 'steps' and 'epochs'; found both (steps at "
        "line 4, epochs at line 5)"}},
      {"neither steps nor epochs",
       R"(model:
  layers: [dense: {units: 10}]
train:
  batch_per_device: 8
)",
       {},
       {"broken.yaml:4:3: train: give exactly one of 'steps' and 'epochs'; found neither"}},
      {"neither batch key",
       R"(model:
  layers: [dense: {units: 10}]
train:
  steps: 10
)",
       {},
       {"broken.yaml:4:3: train: give exactly one of 'batch_per_device' and 'global_batch'; "
        "found neither"}},
      {"both batch keys",
       R"(model:
  layers: [dense: {units: 10}]
train: {steps: 10, global_batch: 64, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:38: train: give exactly one of 'batch_per_device' and 'global_batch'; "
        "found both"}},
      {"bad gpus string",
       R"(model:
  layers: [dense: {units: 10}]
devices:
  gpus: first
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:4:9: devices.gpus: 'first' is not allowed: must be 'all', a list of GPU "
        "ordinals >= 0"}},
      {"auto:0",
       R"(model:
  layers: [dense: {units: 10}]
devices: {gpus: "auto:0"}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:17: devices.gpus: 'auto:0' is not allowed", "'auto:N' with N >= 1"}},
      {"negative GPU ordinal in a list",
       R"(model:
  layers: [dense: {units: 10}]
devices: {gpus: [0, -1]}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:21: devices.gpus[1]: -1 is not allowed: must be an integer in [0, 1023]"}},
      {"unknown backend",
       R"(model:
  layers: [dense: {units: 10}]
devices: {backend: gpu}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:20: devices.backend: 'gpu' is not allowed: must be one of: auto, cpu, "
        "cuda"}},
      {"cudnn engine on the cpu backend",
       R"(model:
  layers: [dense: {units: 10}]
devices: {backend: cpu, engine: cudnn}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:33: devices.engine: 'cudnn' is not allowed with backend cpu"}},
      {"blas engine on the cuda backend",
       R"(model:
  layers: [dense: {units: 10}]
devices: {backend: cuda, engine: blas}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:34: devices.engine: 'blas' is not allowed with backend cuda"}},
      {"dropout rate 1.0",
       R"(model:
  layers:
    - dense: {units: 10}
    - dropout: {rate: 1.0}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:4:23: model.layers[1].dropout.rate: 1.0 is not allowed: must be a number in "
        "[0, 1)"}},
      {"momentum under adam",
       R"(model:
  layers: [dense: {units: 10}]
train: {steps: 10, batch_per_device: 8}
optimizer:
  type: adam
  momentum: 0.9
)",
       {},
       {"broken.yaml:6:3: optimizer.momentum: 'momentum' is not allowed with type adam (it is an "
        "sgd option)"}},
      {"beta1 under sgd",
       R"(model:
  layers: [dense: {units: 10}]
train: {steps: 10, batch_per_device: 8}
optimizer: {type: sgd, beta1: 0.9}
)",
       {},
       {"broken.yaml:4:24: optimizer.beta1: 'beta1' is not allowed with type sgd"}},
      {"negative weight decay",
       R"(model:
  layers: [dense: {units: 10}]
train: {steps: 10, batch_per_device: 8}
optimizer: {weight_decay: -0.1}
)",
       {},
       {"broken.yaml:4:27: optimizer.weight_decay: -0.1 is not allowed: must be a number >= 0"}},
      {"bad weight decay mode, with a hint",
       R"(model:
  layers: [dense: {units: 10}]
train: {steps: 10, batch_per_device: 8}
optimizer: {weight_decay_mode: decouple}
)",
       {},
       {"broken.yaml:4:32: optimizer.weight_decay_mode: 'decouple' is not allowed: must be one "
        "of: l2, decoupled; did you mean 'decoupled'?"}},
      {"step option under a cosine schedule",
       R"(model:
  layers: [dense: {units: 10}]
train: {steps: 10, batch_per_device: 8}
schedule:
  type: cosine
  gamma: 0.5
)",
       {},
       {"broken.yaml:6:3: schedule.gamma: 'gamma' is not allowed with type cosine (it is a step "
        "option)"}},
      {"bad padding",
       R"(model:
  layers:
    - conv2d: {filters: 6, kernel: 5, padding: full}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:48: model.layers[0].conv2d.padding: 'full' is not allowed: must be same, "
        "valid or an integer in [0, 1048576]"}},
      {"non-map layer item",
       R"(model:
  layers:
    - dense: {units: 10}
    - 5
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:4:7: model.layers[1]: 5 is not allowed: a layer is a map with one key, its "
        "kind"}},
      {"layer item with two kinds",
       R"(model:
  layers:
    - {relu: {}, flatten: {}}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:7: model.layers[0]: a map with 2 keys (relu, flatten) is not allowed"}},
      {"bad batchnorm shorthand",
       R"(model:
  layers:
    - dense: {units: 10, batchnorm: 3}
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:3:37: model.layers[0].dense.batchnorm: 3 is not allowed: must be true, false "
        "or a map of batch-norm options"}},
      {"stddev on an initializer that has none",
       R"(model:
  init: {type: he_normal, stddev: 0.1}
  layers: [dense: {units: 10}]
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:2:27: model.init.stddev: 'stddev' is not allowed here: only truncated_normal "
        "takes mean and stddev"}},
      {"model.input of the wrong length",
       R"(model:
  input: [28, 28]
  layers: [dense: {units: 10}]
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:2:10: model.input: a list is not allowed: must be a list of three integers"}},
      {"duplicated key",
       R"(model:
  layers: [dense: {units: 10}]
train:
  steps: 10
  batch_per_device: 8
  steps: 20
)",
       {},
       {"broken.yaml:6:3: train.steps: duplicate key 'steps' (first given at line 4)"}},
      {"unknown log format",
       R"(model:
  layers: [dense: {units: 10}]
train: {steps: 10, batch_per_device: 8}
output: {log_format: json}
)",
       {},
       {"broken.yaml:4:22: output.log_format: 'json' is not allowed: must be one of: standard, "
        "seed"}},
      {"missing model section",
       R"(name: t
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:1:1: model: the 'model' section is required"}},
      {"YAML syntax error",
       R"(model:
  layers: [dense: {units: 10}
train: {steps: 10}
)",
       {},
       {"broken.yaml:", "not valid YAML"}},
      {"a config that is not a map",
       "just some words\n",
       {},
       {"broken.yaml:1:1: (top level): 'just some words' is not allowed: a config file is a map"}},
      {"empty section: the message points at its key",
       R"(model:
  layers: [dense: {units: 10}]
train:
)",
       {},
       {"broken.yaml:3:1: train: give exactly one of 'steps' and 'epochs'; found neither"}},
      {"layer without options where one is required (an empty relu is fine)",
       R"(model:
  layers:
    - relu:
    - dense:
train: {steps: 10, batch_per_device: 8}
)",
       {},
       {"broken.yaml:4:7: model.layers[1].dense: 'units' is required"}},
      {"cosine floor above the learning rate",
       R"(model:
  layers: [dense: {units: 10}]
train: {steps: 10, batch_per_device: 8}
schedule: {type: cosine, min_lr: 0.5}
)",
       {},
       {"broken.yaml:4:34: schedule.min_lr: 0.5 is not allowed: must be <= optimizer.lr (0.001)"}},
      {"bad override path",
       kMinimal,
       {"model..layers=3"},
       {"broken.yaml: --set 'model..layers=3': 'model..layers' is not a valid key path (empty key "
        "at character 7)"}},
      {"override without '='",
       kMinimal,
       {"train.steps"},
       {"broken.yaml: --set 'train.steps': an override is key.path=value"}},
      {"override of an unknown key, with a hint",
       kMinimal,
       {"train.stpes=5"},
       {"broken.yaml: --set 'train.stpes=5': train.stpes: unknown key 'stpes' in train; did you "
        "mean 'steps'?"}},
      {"override of an unknown section",
       kMinimal,
       {"optimiser.lr=0.1"},
       {"broken.yaml: --set 'optimiser.lr=0.1': optimiser: unknown key 'optimiser' at the top "
        "level; did you mean 'optimizer'?"}},
      {"override with a bad value",
       kMinimal,
       {"model.layers[0].conv2d.filters=-4"},
       {"broken.yaml: --set 'model.layers[0].conv2d.filters=-4': model.layers[0].conv2d.filters: "
        "-4 is not allowed: must be an integer in [1, 1048576]"}},
      {"override of a list index out of range",
       kMinimal,
       {"model.layers[9].dense.units=5"},
       {"broken.yaml: --set 'model.layers[9].dense.units=5': model.layers has 3 items (indices "
        "0..2); [9] is out of range"}},
      {"override naming the wrong layer kind",
       kMinimal,
       {"model.layers[0].dense.units=5"},
       {"broken.yaml: --set 'model.layers[0].dense.units=5': model.layers[0] is a 'conv2d' layer, "
        "not 'dense'"}},
      {"override that breaks a cross-key rule",
       kMinimal,
       {"schedule.type=cosine", "schedule.min_lr=0.5"},
       {"broken.yaml: --set 'schedule.min_lr=0.5': schedule.min_lr"}},
  };
  REQUIRE(cases.size() >= 20);
  for (const auto& c : cases) {
    INFO("case: " << c.what);
    std::string message = config_error(c.yaml, c.overrides);
    INFO("message: " << message);
    REQUIRE_FALSE(message.empty());
    for (const auto& piece : c.expected) CHECK_THAT(message, Contains(piece));
  }
}

TEST_CASE("the minimal config is valid and gets the documented defaults", "[config]") {
  Experiment e = parse_experiment(kMinimal, "minimal.yaml");
  CHECK(e.name == "tiny");
  CHECK(e.seed == 42);
  CHECK(e.source_path == "minimal.yaml");
  CHECK(e.data.dataset == "mnist");
  CHECK(e.data.dir == "data/mnist");
  CHECK(e.data.train_images.empty());
  CHECK(e.data.validation_size == 0);
  CHECK(e.data.random_shift == 0);
  CHECK(e.optimizer.epsilon_style == AdamEpsilon::pytorch);
  CHECK(e.model.input_c == 1);
  CHECK(e.model.input_h == 28);
  CHECK(e.model.input_w == 28);
  CHECK(e.model.classes == 10);
  CHECK(e.devices.backend == BackendChoice::auto_select);
  CHECK(e.devices.gpus_mode == GpuSelection::all);
  CHECK(e.devices.engine == Engine::native);
  CHECK(e.devices.cpu_workers == 1);
  CHECK(e.train.steps == 10);
  CHECK(e.train.epochs == 0);
  CHECK(e.train.batch_per_device == 8);
  CHECK(e.train.global_batch == 0);
  CHECK(e.train.log_every == 10);
  CHECK(e.train.eval_every == 0);
  CHECK(e.train.batch_norm == BatchNormMode::local);
  CHECK(e.optimizer.kind == OptimizerKind::adam);
  CHECK(e.optimizer.lr == 0.001);
  CHECK(e.optimizer.weight_decay == 0);
  CHECK(e.schedule.kind == ScheduleKind::constant);
  CHECK(e.output.dir == "runs/tiny");
  CHECK(e.output.log_format == LogFormat::standard);
  CHECK(e.checkpoint.every == 0);
  CHECK(e.checkpoint.keep == 3);

  REQUIRE(kinds(e) == std::vector<std::string>{"conv2d", "flatten", "dense"});
  const LayerSpec& conv = e.model.layers[0];
  CHECK(conv.stride == 1);
  CHECK(conv.padding == PaddingMode::same);
  CHECK(conv.bias);  // no normalizer: the layer keeps its bias
  CHECK(conv.init.kind == InitKind::truncated_normal);
  CHECK(conv.init.stddev == 0.01f);
  CHECK(conv.yaml_path == "model.layers[0]");
  CHECK(conv.yaml_line == 4);
  CHECK(e.model.layers[2].yaml_line == 6);
}

TEST_CASE("layer options: defaults, explicit padding, pools, initializers", "[config]") {
  Experiment e = parse_experiment(R"(name: opts
data: {dataset: fashion-mnist}
model:
  input: [3, 32, 30]
  classes: 7
  init: he_normal
  batch_norm: {decay: 0.99, scale: true}
  layers:
    - conv2d: {filters: 8, kernel: 3, stride: 2, padding: 1, init: {type: truncated_normal, stddev: 0.1}}
    - batch_norm: {epsilon: 0.01}
    - max_pool: {size: 3}
    - max_pool: {size: 3, stride: 1}
    - conv2d: {filters: 4, kernel: 1, padding: valid, batchnorm: {center: false}, bias: true}
    - flatten: {}
    - dropout: {}
    - dense: {units: 7, init: zeros}
train: {epochs: 1.5, global_batch: 256}
)",
                                  "opts.yaml");
  CHECK(e.data.dir == "data/fashion-mnist");
  CHECK(e.model.input_c == 3);
  CHECK(e.model.input_h == 32);
  CHECK(e.model.input_w == 30);
  CHECK(e.model.classes == 7);
  CHECK(e.train.epochs == 1.5);
  CHECK(e.train.global_batch == 256);
  REQUIRE(kinds(e) == std::vector<std::string>{"conv2d", "batch_norm", "max_pool", "max_pool",
                                               "conv2d", "batch_norm", "flatten", "dropout",
                                               "dense"});
  const auto& L = e.model.layers;
  CHECK(L[0].padding == PaddingMode::explicit_pixels);
  CHECK(L[0].padding_pixels == 1);
  CHECK(L[0].stride == 2);
  CHECK(L[0].init.kind == InitKind::truncated_normal);
  CHECK(L[0].init.stddev == 0.1f);
  // Model-wide batch-norm defaults reach explicit layers and the shorthand, options override them.
  CHECK(L[1].decay == 0.99f);
  CHECK(L[1].epsilon == 0.01f);
  CHECK(L[1].scale);
  CHECK(L[2].pool_size == 3);
  CHECK(L[2].stride == 3);  // stride defaults to the window size
  CHECK(L[3].stride == 1);
  CHECK(L[4].padding == PaddingMode::valid);
  CHECK(L[4].bias);                              // explicit bias wins over the batchnorm default
  CHECK(L[4].init.kind == InitKind::he_normal);  // the model-wide initializer
  CHECK(L[5].decay == 0.99f);
  CHECK_FALSE(L[5].center);
  CHECK(L[5].yaml_path == "model.layers[4].conv2d.batchnorm");
  CHECK(L[5].yaml_line == 13);
  CHECK(L[7].rate == 0.5f);
  CHECK(L[8].init.kind == InitKind::zeros);
}

TEST_CASE("overrides are applied to the YAML before validation", "[config]") {
  Experiment e = parse_experiment(
      kMinimal, "minimal.yaml",
      {"train.steps=50", "devices.gpus=[0, 0]", "model.layers[2].dense.units=50",
       "model.layers[0].conv2d.batchnorm=true", "schedule.type=cosine", "schedule.min_lr=0.0001",
       "optimizer={type: sgd, lr: 0.1, momentum: 0.9, nesterov: true}", "name=renamed",
       "data.files.train_images=/tmp/x-images"});
  CHECK(e.train.steps == 50);
  CHECK(e.devices.gpus_mode == GpuSelection::list);
  CHECK(e.devices.gpu_list == std::vector<int>{0, 0});  // two workers on one GPU is allowed
  CHECK(e.model.layers.back().units == 50);
  CHECK(kinds(e) == std::vector<std::string>{"conv2d", "batch_norm", "flatten", "dense"});
  CHECK_FALSE(e.model.layers[0].bias);
  CHECK(e.schedule.kind == ScheduleKind::cosine);
  CHECK(e.schedule.min_lr == 0.0001);
  CHECK(e.optimizer.kind == OptimizerKind::sgd);
  CHECK(e.optimizer.lr == 0.1);
  CHECK(e.optimizer.momentum == 0.9);
  CHECK(e.optimizer.nesterov);
  CHECK(e.output.dir == "runs/renamed");  // the default follows the overridden name
  CHECK(e.data.train_images == "/tmp/x-images");

  // The last override of a key wins; a later valid one repairs an earlier bad one.
  CHECK(parse_experiment(kMinimal, "m.yaml", {"train.steps=-1", "train.steps=7"}).train.steps == 7);
  Experiment auto_gpus = parse_experiment(kMinimal, "m.yaml", {"devices.gpus=auto:2"});
  CHECK(auto_gpus.devices.gpus_mode == GpuSelection::auto_count);
  CHECK(auto_gpus.devices.gpus_auto_count == 2);
}

TEST_CASE("to_yaml reads back to the same experiment", "[config]") {
  SECTION("non-default choices in every section") {
    Experiment e = parse_experiment(R"(name: everything
seed: 7
data:
  dataset: custom
  dir: /data/x
  files: {train_images: a.idx, test_labels: "b c.idx"}
model:
  input: [1, 20, 20]
  classes: 4
  init: {type: truncated_normal, mean: 0.25, stddev: 0.3}
  layers:
    - conv2d: {filters: 3, kernel: 3, padding: 2, init: glorot_uniform, batchnorm: {scale: true}, activation: relu}
    - max_pool: {size: 2, stride: 1}
    - flatten: {}
    - dropout: {rate: 0.1}
    - dense: {units: 4, bias: false}
devices: {backend: cuda, gpus: "auto:3", engine: cudnn, cpu_workers: 2, threads: 4}
train:
  epochs: 0.7
  global_batch: 96
  log_every: 3
  eval_every: 9
  eval_batch: 33
  batch_norm: sync
  scale_lr_with_devices: true
  watchdog_seconds: 12.5
optimizer: {type: sgd, lr: 0.3, momentum: 0.95, nesterov: true, weight_decay: 0.0005, weight_decay_mode: decoupled}
schedule: {type: step, warmup_steps: 5, step_size: 40, gamma: 0.3}
output: {dir: /tmp/out, log_format: seed}
checkpoint: {every: 25, keep: 1}
)",
                                    "everything.yaml");
    std::string text = to_yaml(e);
    INFO(text);
    Experiment back = parse_experiment(text, "resolved.yaml");
    require_same(e, back);
    // Spot checks that the values are the non-defaults (so equality above is not vacuous).
    CHECK(back.data.test_labels == "b c.idx");
    CHECK(back.model.layers[0].padding_pixels == 2);
    CHECK(back.model.layers[0].init.kind == InitKind::glorot_uniform);
    CHECK(back.devices.gpus_auto_count == 3);
    CHECK(back.train.epochs == 0.7);
    CHECK(back.optimizer.weight_decay_mode == WeightDecayMode::decoupled);
    CHECK(back.schedule.gamma == 0.3);
    CHECK(back.checkpoint.every == 25);
  }
}

TEST_CASE("a config file that cannot be read names the file", "[config]") {
  const std::string missing =
      (std::filesystem::temp_directory_path() / "mnist-train-no-such-config.yaml").string();
  CHECK_THROWS_MATCHES(load_experiment(missing), ConfigError,
                       Catch::Matchers::Predicate<ConfigError>([&](const ConfigError& e) {
                         std::string m = e.what();
                         return m.find(missing) != std::string::npos &&
                                m.find("config file not found") != std::string::npos;
                       }));
}

// The message of whatever ConfigError `parse` throws ("" if none).
static std::string error_of(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("an override of one of two exclusive keys replaces the other, and --unset removes keys",
          "[config]") {
  // kMinimal has train.batch_per_device and train.steps.
  Experiment e = parse_experiment(kMinimal, "m.yaml", {"train.global_batch=300"});
  CHECK(e.train.global_batch == 300);
  CHECK(e.train.batch_per_device == 0);
  e = parse_experiment(kMinimal, "m.yaml", {"train.epochs=2"});
  CHECK(e.train.epochs == 2);
  CHECK(e.train.steps == 0);
  // --unset, then the overrides: the same result spelt out.
  e = parse_experiment(kMinimal, "m.yaml", {"train.global_batch=64"}, {"train.batch_per_device"});
  CHECK(e.train.global_batch == 64);
  // Unsetting a key that is not there, or a list item, is an error naming the --unset.
  const std::string missing =
      error_of([] { parse_experiment(kMinimal, "m.yaml", {}, {"train.epochs"}); });
  CHECK(missing.find("m.yaml: --unset 'train.epochs'") != std::string::npos);
  CHECK(missing.find("no key 'train.epochs'") != std::string::npos);
  CHECK(error_of([] {
          parse_experiment(kMinimal, "m.yaml", {}, {"model.layers[0]"});
        }).find("not a list item") != std::string::npos);
  // Unsetting the only one of an exclusive pair: the rule names both keys.
  CHECK(error_of([] {
          parse_experiment(kMinimal, "m.yaml", {}, {"train.steps"});
        }).find("give exactly one of 'steps' and 'epochs'; found neither") != std::string::npos);
}

TEST_CASE("two exclusive keys from the file name their lines, never 'line 0'", "[config]") {
  const std::string both = error_of([] {
    parse_experiment(R"(model:
  layers:
    - flatten: {}
    - dense: {units: 10}
train:
  steps: 10
  batch_per_device: 8
  global_batch: 16
)",
                     "both.yaml");
  });
  CHECK(both.find("found both (batch_per_device at line 7, global_batch at line 8)") !=
        std::string::npos);
  CHECK(both.find("line 0") == std::string::npos);
}

TEST_CASE("values with raw bytes are quoted with escapes in messages", "[config]") {
  // A damaged file (or a checkpoint's embedded config) may hold any byte: the message shows it
  // escaped, never raw.
  const std::string message = error_of([] {
    parse_experiment(std::string(kMinimal) + "devices: {backend: \"cu\\x01da\\xff\"}\n",
                     "raw.yaml");
  });
  INFO(message);
  CHECK(message.find("'cu\\x01da") != std::string::npos);
  CHECK(message.find('\x01') == std::string::npos);
  CHECK(printable("caf\xc3\xa9 \xff\xfe\n\t\\ ok") == "caf\xc3\xa9 \\xff\\xfe\\n\\t\\\\ ok");
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");       // a UTF-16 surrogate is not UTF-8
  CHECK(printable("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");  // U+1F600 is
  CHECK(printable("\xe2\x82") == "\\xe2\\x82");                // cut short
}

TEST_CASE("data.validation_size, data.random_shift and optimizer.epsilon_style", "[config]") {
  const Experiment e = parse_experiment(
      kMinimal, "minimal.yaml",
      {"data.validation_size=5000", "data.random_shift=2", "optimizer.epsilon_style=tensorflow"});
  CHECK(e.data.validation_size == 5000);
  CHECK(e.data.random_shift == 2);
  CHECK(e.optimizer.epsilon_style == AdamEpsilon::tensorflow);
  const Experiment back = parse_experiment(to_yaml(e), "resolved.yaml");
  require_same(e, back);

  CHECK_THAT(config_error(kMinimal, {"data.random_shift=9"}),
             Contains("data.random_shift") && Contains("9"));
  CHECK_THAT(config_error(kMinimal, {"data.validation_size=-1"}),
             Contains("data.validation_size") && Contains("-1"));
  CHECK_THAT(config_error(kMinimal, {"optimizer.epsilon_style=keras"}),
             Contains("optimizer.epsilon_style") && Contains("keras"));
  CHECK_THAT(config_error(kMinimal, {"optimizer.type=sgd", "optimizer.epsilon_style=tensorflow"}),
             Contains("'epsilon_style' is not allowed with type sgd"));
}

TEST_CASE("train.keep_best and train.patience: defaults by the validation split, and their rules",
          "[config]") {
  // Without a validation split nothing is kept; with one, the best by validation accuracy.
  CHECK(parse_experiment(kMinimal, "minimal.yaml").train.keep_best == KeepBest::none);
  const Experiment split = parse_experiment(kMinimal, "minimal.yaml", {"data.validation_size=100"});
  CHECK(split.train.keep_best == KeepBest::validation_accuracy);
  CHECK(split.train.patience == 0);
  const Experiment e = parse_experiment(kMinimal, "minimal.yaml",
                                        {"data.validation_size=100", "train.eval_every=5",
                                         "train.keep_best=validation_loss", "train.patience=3"});
  CHECK(e.train.keep_best == KeepBest::validation_loss);
  CHECK(e.train.patience == 3);
  // The resolved config reads back the same, with and without a split.
  require_same(e, parse_experiment(to_yaml(e), "resolved.yaml"));
  const Experiment plain = parse_experiment(kMinimal, "minimal.yaml");
  require_same(plain, parse_experiment(to_yaml(plain), "resolved.yaml"));

  CHECK_THAT(config_error(kMinimal, {"train.keep_best=validation_accuracy"}),
             Contains("train.keep_best") && Contains("validation_accuracy") &&
                 Contains("data.validation_size > 0") && Contains("--set"));
  CHECK(config_error(kMinimal, {"train.keep_best=none"}).empty());
  CHECK_THAT(config_error(kMinimal, {"data.validation_size=100", "train.keep_best=test_accuracy"}),
             Contains("train.keep_best") && Contains("test_accuracy") &&
                 Contains("validation_accuracy, validation_loss, none"));
  CHECK_THAT(config_error(kMinimal, {"train.eval_every=5", "train.patience=2"}),
             Contains("train.patience") && Contains("a validation split"));
  CHECK_THAT(config_error(kMinimal, {"data.validation_size=100", "train.patience=2"}),
             Contains("train.patience") && Contains("train.eval_every > 0"));
  CHECK_THAT(config_error(kMinimal, {"data.validation_size=100", "train.eval_every=5",
                                     "train.keep_best=none", "train.patience=2"}),
             Contains("train.patience") && Contains("a metric to watch"));
  CHECK_THAT(config_error(kMinimal,
                          {"data.validation_size=100", "train.eval_every=5", "train.patience=-1"}),
             Contains("train.patience") && Contains("-1"));
  // In a file, the message names the file, line and value.
  const std::string in_file = std::string(kMinimal) + "  keep_best: validation_loss\n";
  CHECK_THAT(config_error(in_file), Contains("broken.yaml:") && Contains("train.keep_best") &&
                                        Contains("validation_loss"));
}
