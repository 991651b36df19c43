// The canonical math-config text, its hash and the differences a refused resume lists
// (math_config.hpp). Layer options come from the layer-kind rows and enum words from the spelling
// tables, so this text and to_yaml cannot name a setting differently.

#include "config/math_config.hpp"

#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "config/layer_kinds.hpp"
#include "core/fnv1a.hpp"

namespace mnist {
namespace {

const char* boolean(bool b) {
  return b ? "true" : "false";
}

std::vector<std::pair<std::string, std::string>> parse_lines(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) {
      out.emplace_back(line, "");
    } else {
      out.emplace_back(line.substr(0, eq), line.substr(eq + 1));
    }
  }
  return out;
}

}  // namespace

std::string math_config_text(const Experiment& e) {
  std::string out;
  auto line = [&](const std::string& key, const auto& value) {
    out += fmt::format("{}={}\n", key, value);
  };
  line("seed", e.seed);
  // Keys added later appear only when set, so earlier checkpoints keep their hash.
  if (e.data.validation_size > 0) line("data.validation_size", e.data.validation_size);
  if (e.data.random_shift > 0) line("data.random_shift", e.data.random_shift);
  const ModelConfig& m = e.model;
  line("model.input", fmt::format("{},{},{}", m.input_c, m.input_h, m.input_w));
  line("model.classes", m.classes);
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    const LayerSpec& l = m.layers[i];
    const std::string p = fmt::format("model.layers[{}]", i);
    line(p, to_string(l.kind));
    for (const config_detail::LayerOption& option : config_detail::layer_kind(l.kind).options) {
      if (const std::optional<std::string> text = option.text(l)) line(p + "." + option.key, *text);
    }
  }
  const OptimizerConfig& o = e.optimizer;
  line("optimizer.type", to_string(o.kind));
  line("optimizer.lr", o.lr);
  if (o.kind == OptimizerKind::adam) {
    line("optimizer.beta1", o.beta1);
    line("optimizer.beta2", o.beta2);
    line("optimizer.epsilon", o.epsilon);
    // Keys added later appear only when set, so earlier checkpoints keep their hash.
    if (o.epsilon_style != AdamEpsilon::pytorch) line("optimizer.epsilon_style", to_string(o.epsilon_style));
  } else {
    line("optimizer.momentum", o.momentum);
    line("optimizer.nesterov", boolean(o.nesterov));
  }
  line("optimizer.weight_decay", o.weight_decay);
  line("optimizer.weight_decay_mode", to_string(o.weight_decay_mode));
  const ScheduleConfig& s = e.schedule;
  line("schedule.type", to_string(s.kind));
  line("schedule.warmup_steps", s.warmup_steps);
  if (s.kind == ScheduleKind::step) {
    line("schedule.step_size", s.step_size);
    line("schedule.gamma", s.gamma);
  }
  if (s.kind == ScheduleKind::cosine) line("schedule.min_lr", s.min_lr);
  const TrainConfig& t = e.train;
  if (t.batch_per_device > 0) {
    line("train.batch_per_device", t.batch_per_device);
  } else {
    line("train.global_batch", t.global_batch);
  }
  line("train.batch_norm", to_string(t.batch_norm));
  line("train.scale_lr_with_devices", boolean(t.scale_lr_with_devices));
  // It moves the running statistics at logged steps; recorded only when on (added later).
  if (t.log_after_update) line("train.log_after_update", "true");
  if (s.kind == ScheduleKind::cosine) {
    if (t.steps > 0) {
      line("train.steps", t.steps);
    } else {
      line("train.epochs", t.epochs);
    }
  }
  return out;
}

std::string math_config_hash(const Experiment& experiment) {
  return math_config_hash_of(math_config_text(experiment));
}

std::string math_config_hash_of(const std::string& text) {
  return fmt::format("{:016x}", fnv1a(text));
}

std::vector<std::string> math_config_differences(const Experiment& experiment,
                                                 const std::string& saved_text) {
  const auto saved = parse_lines(saved_text);
  const auto current = parse_lines(math_config_text(experiment));
  const std::map<std::string, std::string> saved_map(saved.begin(), saved.end());
  const std::map<std::string, std::string> current_map(current.begin(), current.end());
  std::vector<std::string> out;
  auto show = [](const std::map<std::string, std::string>& m, const std::string& key) {
    const auto it = m.find(key);
    return it == m.end() ? std::string("(absent)") : it->second;
  };
  // Current order first (it is the documented order), then keys only the checkpoint has.
  for (const auto& [key, value] : current) {
    const auto it = saved_map.find(key);
    if (it == saved_map.end() || it->second != value)
      out.push_back(fmt::format("{}: checkpoint {}, config {}", key, show(saved_map, key), value));
  }
  for (const auto& [key, value] : saved)
    if (current_map.count(key) == 0)
      out.push_back(fmt::format("{}: checkpoint {}, config (absent)", key, value));
  return out;
}

}  // namespace mnist
