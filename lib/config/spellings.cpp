// The spelling tables of spellings.hpp: the one place a config word is tied to an enum value.
// Row order is the order error messages list the words in.

#include "config/spellings.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace mnist {
void throw_missing_spelling(int value) {
  MNIST_THROW(RuntimeError, "enum value {} has no spelling in its table", value);
}

// LayerKind's table is made from the layer-kind rows (layer_kinds.cpp).

const std::vector<Spelling<PaddingMode>>& spellings(PaddingMode) {
  static const std::vector<Spelling<PaddingMode>> rows = {{"same", PaddingMode::same},
                                                          {"valid", PaddingMode::valid}};
  return rows;
}

const std::vector<Spelling<InitKind>>& spellings(InitKind) {
  static const std::vector<Spelling<InitKind>> rows = {
      {"truncated_normal", InitKind::truncated_normal},
      {"he_normal", InitKind::he_normal},
      {"glorot_uniform", InitKind::glorot_uniform},
      {"zeros", InitKind::zeros}};
  return rows;
}

const std::vector<Spelling<BackendChoice>>& spellings(BackendChoice) {
  static const std::vector<Spelling<BackendChoice>> rows = {{"auto", BackendChoice::auto_select},
                                                            {"cpu", BackendChoice::cpu},
                                                            {"cuda", BackendChoice::cuda}};
  return rows;
}

const std::vector<Spelling<GpuSelection>>& spellings(GpuSelection) {
  static const std::vector<Spelling<GpuSelection>> rows = {
      {"all", GpuSelection::all}, {"list", GpuSelection::list}, {"auto", GpuSelection::auto_count}};
  return rows;
}

const std::vector<Spelling<BatchNormMode>>& spellings(BatchNormMode) {
  static const std::vector<Spelling<BatchNormMode>> rows = {{"local", BatchNormMode::local},
                                                            {"sync", BatchNormMode::sync}};
  return rows;
}

const std::vector<Spelling<LogFormat>>& spellings(LogFormat) {
  static const std::vector<Spelling<LogFormat>> rows = {{"standard", LogFormat::standard},
                                                        {"seed", LogFormat::seed}};
  return rows;
}

const std::vector<Spelling<OptimizerKind>>& spellings(OptimizerKind) {
  static const std::vector<Spelling<OptimizerKind>> rows = {{"adam", OptimizerKind::adam},
                                                            {"sgd", OptimizerKind::sgd}};
  return rows;
}

const std::vector<Spelling<AdamEpsilon>>& spellings(AdamEpsilon) {
  static const std::vector<Spelling<AdamEpsilon>> rows = {{"pytorch", AdamEpsilon::pytorch},
                                                          {"tensorflow", AdamEpsilon::tensorflow}};
  return rows;
}

const std::vector<Spelling<WeightDecayMode>>& spellings(WeightDecayMode) {
  static const std::vector<Spelling<WeightDecayMode>> rows = {
      {"l2", WeightDecayMode::l2}, {"decoupled", WeightDecayMode::decoupled}};
  return rows;
}

const std::vector<Spelling<ScheduleKind>>& spellings(ScheduleKind) {
  static const std::vector<Spelling<ScheduleKind>> rows = {{"constant", ScheduleKind::constant},
                                                           {"step", ScheduleKind::step},
                                                           {"cosine", ScheduleKind::cosine}};
  return rows;
}

const std::vector<Spelling<KeepBest>>& spellings(KeepBest) {
  static const std::vector<Spelling<KeepBest>> rows = {
      {"validation_accuracy", KeepBest::validation_accuracy},
      {"validation_loss", KeepBest::validation_loss},
      {"none", KeepBest::none}};
  return rows;
}

const char* to_string(PaddingMode v) {
  // Explicit padding is written as its pixel count, so it has no word in the table.
  return v == PaddingMode::explicit_pixels ? "explicit" : to_string<PaddingMode>(v);
}

Engine parse_engine(const std::string& name, const std::string& what) {
  if (const std::optional<Engine> e = from_string<Engine>(name)) return *e;
  MNIST_THROW(ConfigError, "{}: unknown engine '{}'; known: {}", what, name,
              fmt::join(spelling_names<Engine>(), ", "));
}

std::vector<Engine> engines_of(BackendChoice backend) {
  if (backend == BackendChoice::cpu) return engines_run_by(false);
  if (backend == BackendChoice::cuda) return engines_run_by(true);
  std::vector<Engine> out;
  for (const EngineSpelling& row : spellings(Engine{})) out.push_back(row.value);
  return out;
}

}  // namespace mnist
