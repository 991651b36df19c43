#pragma once
// Every enum a config file names, with the one table of its spellings.
//
// Why one table per enum: the reader parses with it, to_yaml and the math-config text write with
// it, and error messages list it ("must be one of: ..."), so a spelling cannot drift between the
// file that reads a value and the file that writes it back. Adding a value (a CUDA engine, an
// initializer) is one enum member plus one table row; the code that acts on the value (a kernel,
// an init rule) is the only other place to touch.
//
// The tables are in spellings.cpp, in the order messages list them.

#include <optional>
#include <string>
#include <vector>

#include "core/engine.hpp"  // Engine and its table, shared with the backends

namespace mnist {

enum class LayerKind { conv2d, max_pool, batch_norm, relu, dense, dropout, flatten };
enum class PaddingMode { same, valid, explicit_pixels };
enum class InitKind { truncated_normal, he_normal, glorot_uniform, zeros };
enum class BackendChoice { auto_select, cpu, cuda };
// devices.gpus: the string "all", a YAML list of ordinals, or "auto:N".
enum class GpuSelection { all, list, auto_count };
enum class BatchNormMode { local, sync };
enum class LogFormat { standard, seed };
enum class OptimizerKind { adam, sgd };
// Where Adam adds epsilon: to sqrt(v_hat) (Kingma & Ba, PyTorch) or to sqrt(v) with the bias
// corrections folded into the step size (TensorFlow 1's AdamOptimizer): the latter equals the
// former with epsilon * sqrt(1 / (1 - beta2^t)), which is larger early in training.
enum class AdamEpsilon { pytorch, tensorflow };
enum class WeightDecayMode { l2, decoupled };
enum class ScheduleKind { constant, step, cosine };
// train.keep_best: the validation metric that picks the best checkpoint (and that early stopping
// watches), or none.
enum class KeepBest { validation_accuracy, validation_loss, none };

// One row of an enum's table: how a config file spells `value`.
template <class E>
struct Spelling {
  const char* name;
  E value;
};

// The tables, chosen by the enum type of the (ignored) argument: spellings(Engine{}).
const std::vector<Spelling<LayerKind>>& spellings(LayerKind);
const std::vector<Spelling<PaddingMode>>& spellings(PaddingMode);  // same, valid (pixels: a number)
const std::vector<Spelling<InitKind>>& spellings(InitKind);
const std::vector<Spelling<BackendChoice>>& spellings(BackendChoice);
const std::vector<Spelling<GpuSelection>>& spellings(GpuSelection);  // all, list, auto
// spellings(Engine): core/engine.hpp.
const std::vector<Spelling<BatchNormMode>>& spellings(BatchNormMode);
const std::vector<Spelling<LogFormat>>& spellings(LogFormat);
const std::vector<Spelling<OptimizerKind>>& spellings(OptimizerKind);
const std::vector<Spelling<AdamEpsilon>>& spellings(AdamEpsilon);
const std::vector<Spelling<WeightDecayMode>>& spellings(WeightDecayMode);
const std::vector<Spelling<ScheduleKind>>& spellings(ScheduleKind);
const std::vector<Spelling<KeepBest>>& spellings(KeepBest);

[[noreturn]] void throw_missing_spelling(int value);

// The config's spelling of a value, from its enum's table. Never null; PaddingMode has its own
// overload below ("explicit" for explicit_pixels, whose file form is the pixel count).
template <class E, class = decltype(spellings(E{}))>
const char* to_string(E v) {
  for (const auto& row : spellings(E{})) {
    if (row.value == v) return row.name;
  }
  throw_missing_spelling(static_cast<int>(v));
}
const char* to_string(PaddingMode v);

// The spellings of E in table order: {"native", "cublas", "cudnn", "fused", "blas"}.
template <class E>
std::vector<std::string> spelling_names() {
  std::vector<std::string> names;
  for (const auto& row : spellings(E{})) names.push_back(row.name);
  return names;
}

// The value spelled `name`, or nullopt.
template <class E>
std::optional<E> from_string(const std::string& name) {
  for (const auto& row : spellings(E{})) {
    if (name == row.name) return row.value;
  }
  return std::nullopt;
}

// The value spelled `name`; otherwise throws ConfigError "<what>: unknown '<name>'; known: a,
// b, c" (for spellings that come from elsewhere than a config file: a command-line list).
Engine parse_engine(const std::string& name, const std::string& what);

// The engines `backend` runs (table order): CPU native, blas; CUDA native, cublas, cudnn, fused.
std::vector<Engine> engines_of(BackendChoice backend);

}  // namespace mnist
