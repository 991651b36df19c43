#include "sweep/spec.hpp"

#include <algorithm>
#include <set>

#include <yaml-cpp/yaml.h>

#include "config/experiment.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"

namespace mnist {

namespace {

std::string trim(const std::string& s) {
  const std::size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const std::size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// "KEY=VALUE" -> key, value (both trimmed); false when there is no '=' or no key.
bool split_setting(const std::string& text, std::string& key, std::string& value) {
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos) return false;
  key = trim(text.substr(0, eq));
  value = trim(text.substr(eq + 1));
  return !key.empty();
}

// A YAML value as --set's text takes it: scalars as written, lists and maps in flow style.
std::string yaml_text(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

std::string at(const std::string& source, const YAML::Node& node, const std::string& path) {
  const YAML::Mark m = node.Mark();
  if (m.line < 0) return fmt::format("{}: {}", source, path);
  return fmt::format("{}:{}:{}: {}", source, m.line + 1, m.column + 1, path);
}

}  // namespace

std::string SweepPoint::label() const {
  std::string text;
  for (const SweepSetting& s : settings) text += (text.empty() ? "" : " ") + s.text();
  if (seed) text += fmt::format("{}seed={}", text.empty() ? "" : " ", *seed);
  return text.empty() ? "(the base config)" : text;
}

std::vector<std::string> SweepPoint::overrides() const {
  std::vector<std::string> out;
  for (const SweepSetting& s : settings) out.push_back(s.text());
  if (seed) out.push_back(fmt::format("seed={}", *seed));
  return out;
}

std::vector<std::string> split_top_level(const std::string& text) {
  std::vector<std::string> parts;
  std::string part;
  int depth = 0;
  char quote = 0;
  for (char c : text) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '[' || c == '{') {
      ++depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    } else if (c == ',' && depth == 0) {
      parts.push_back(trim(part));
      part.clear();
      continue;
    }
    part += c;
  }
  parts.push_back(trim(part));
  return parts;
}

SweepAxis parse_grid_option(const std::string& text) {
  SweepAxis axis;
  std::string values;
  axis.origin = fmt::format("--grid '{}'", text);
  if (!split_setting(text, axis.key, values))
    MNIST_THROW(UsageError, "{}: an axis is KEY=V1,V2,... (e.g. --grid optimizer.lr=0.001,0.01)",
                axis.origin);
  std::set<std::string> seen;
  for (const std::string& v : split_top_level(values)) {
    if (v.empty())
      MNIST_THROW(UsageError, "{}: an empty value (two commas, or one at an end)", axis.origin);
    if (!seen.insert(v).second)
      MNIST_THROW(UsageError, "{}: the value '{}' is given twice", axis.origin, v);
    axis.values.push_back(v);
  }
  return axis;
}

std::vector<SweepSetting> parse_list_option(const std::string& text, int number) {
  const std::string origin = fmt::format("--list {} ('{}')", number, text);
  std::vector<SweepSetting> group;
  for (const std::string& part : split_top_level(text)) {
    SweepSetting s;
    s.origin = fmt::format("--list {}", number);
    if (!split_setting(part, s.key, s.value) || s.value.empty())
      MNIST_THROW(UsageError,
                  "{}: '{}' is not KEY=VALUE; a group is KEY=VALUE,KEY=VALUE (e.g. --list "
                  "optimizer.lr=0.01,train.batch_per_device=256)",
                  origin, part);
    for (const SweepSetting& other : group)
      if (other.key == s.key) MNIST_THROW(UsageError, "{}: {} is set twice", origin, s.key);
    group.push_back(s);
  }
  return group;
}

std::vector<uint64_t> parse_seeds_option(const std::string& text) {
  std::vector<uint64_t> seeds;
  auto number = [&](const std::string& s) -> uint64_t {
    if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
      MNIST_THROW(UsageError,
                  "--seeds '{}': '{}' is not a seed (a non-negative integer); write e.g. "
                  "--seeds 1,2,3 or --seeds 1-5",
                  text, s);
    return std::stoull(s);
  };
  for (const std::string& part : split_top_level(text)) {
    const std::size_t dash = part.find('-');
    uint64_t first = 0, last = 0;
    if (dash != std::string::npos && dash > 0) {
      first = number(trim(part.substr(0, dash)));
      last = number(trim(part.substr(dash + 1)));
      if (last < first || last - first >= static_cast<uint64_t>(kMaxSweepPoints))
        MNIST_THROW(UsageError, "--seeds '{}': the range {} is empty or too long", text, part);
    } else {
      first = last = number(part);
    }
    for (uint64_t s = first; s <= last; ++s) {
      if (std::find(seeds.begin(), seeds.end(), s) != seeds.end())
        MNIST_THROW(UsageError, "--seeds '{}': seed {} is given twice", text, s);
      seeds.push_back(s);
    }
  }
  return seeds;
}

SweepSpec parse_sweep_file(const std::string& yaml_text_in, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text_in);
  } catch (const YAML::Exception& ex) {
    MNIST_THROW(ConfigError, "{}:{}:{}: not valid YAML: {}", source, ex.mark.line + 1,
                ex.mark.column + 1, ex.msg);
  }
  if (!root.IsMap() || !root["sweep"] || !root["sweep"].IsMap())
    MNIST_THROW(ConfigError,
                "{}: a sweep file is a map with one key 'sweep' holding config, grid, list, "
                "seeds, set and out",
                source);
  for (auto it = root.begin(); it != root.end(); ++it)
    if (it->first.Scalar() != "sweep")
      MNIST_THROW(ConfigError, "{}: unknown key '{}'; a sweep file holds only 'sweep'",
                  at(source, it->first, it->first.Scalar()), it->first.Scalar());
  const YAML::Node sweep = root["sweep"];
  SweepSpec spec;
  static const std::vector<std::string> kKeys = {"config", "grid", "list", "seeds", "set", "out"};
  for (auto it = sweep.begin(); it != sweep.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node value = it->second;
    const std::string path = "sweep." + key;
    if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end())
      MNIST_THROW(ConfigError, "{}: unknown key; known: config, grid, list, seeds, set, out",
                  at(source, it->first, path));
    auto want_map = [&](const YAML::Node& n, const std::string& p) {
      if (!n.IsMap())
        MNIST_THROW(ConfigError, "{}: expected a map of config keys to values", at(source, n, p));
    };
    if (key == "config" || key == "out") {
      if (!value.IsScalar() || value.Scalar().empty())
        MNIST_THROW(ConfigError, "{}: expected a path", at(source, value, path));
      (key == "config" ? spec.config_path : spec.out_dir) = value.Scalar();
    } else if (key == "grid") {
      want_map(value, path);
      for (auto axis_it = value.begin(); axis_it != value.end(); ++axis_it) {
        SweepAxis axis;
        axis.key = axis_it->first.Scalar();
        const std::string axis_path = path + "." + axis.key;
        axis.origin = fmt::format("{} ({})", axis_path, source);
        const YAML::Node values = axis_it->second;
        if (!values.IsSequence() || values.size() == 0)
          MNIST_THROW(ConfigError, "{}: expected a non-empty list of values",
                      at(source, values, axis_path));
        for (const YAML::Node& v : values) {
          const std::string text = yaml_text(v);
          if (std::find(axis.values.begin(), axis.values.end(), text) != axis.values.end())
            MNIST_THROW(ConfigError, "{}: the value '{}' is given twice", at(source, v, axis_path),
                        text);
          axis.values.push_back(text);
        }
        spec.grid.push_back(axis);
      }
    } else if (key == "list") {
      if (!value.IsSequence() || value.size() == 0)
        MNIST_THROW(ConfigError, "{}: expected a non-empty list of maps (one group each)",
                    at(source, value, path));
      for (std::size_t i = 0; i < value.size(); ++i) {
        const std::string group_path = fmt::format("{}[{}]", path, i);
        want_map(value[i], group_path);
        std::vector<SweepSetting> group;
        for (auto s = value[i].begin(); s != value[i].end(); ++s)
          group.push_back({s->first.Scalar(), yaml_text(s->second),
                           fmt::format("{} ({})", group_path, source)});
        spec.groups.push_back(group);
      }
    } else if (key == "seeds") {
      if (!value.IsSequence())
        MNIST_THROW(ConfigError, "{}: expected a list of seeds", at(source, value, path));
      std::string text;
      for (const YAML::Node& v : value) text += (text.empty() ? "" : ",") + yaml_text(v);
      try {
        spec.seeds = parse_seeds_option(text);
      } catch (const UsageError& e) {
        MNIST_THROW(ConfigError, "{}: {}", at(source, value, path), e.what());
      }
    } else {  // set
      want_map(value, path);
      for (auto s = value.begin(); s != value.end(); ++s)
        spec.overrides.push_back(s->first.Scalar() + "=" + yaml_text(s->second));
    }
  }
  return spec;
}

SweepSpec read_sweep_file(const std::string& path) {
  std::string text;
  try {
    text = read_regular_file(path, kMaxConfigBytes, "sweep file");
  } catch (const DataError& e) {
    throw ConfigError(e.what());
  }
  return parse_sweep_file(text, path);
}

std::vector<SweepPoint> expand_points(const SweepSpec& spec) {
  const std::vector<std::vector<SweepSetting>> groups =
      spec.groups.empty() ? std::vector<std::vector<SweepSetting>>{{}} : spec.groups;
  std::set<std::string> axis_keys;
  for (const SweepAxis& axis : spec.grid) {
    if (!axis_keys.insert(axis.key).second)
      MNIST_THROW(UsageError, "{}: the grid has two axes for {}", axis.origin, axis.key);
    for (const auto& group : groups)
      for (const SweepSetting& s : group)
        if (s.key == axis.key)
          MNIST_THROW(UsageError, "{} sets {}, which {} also sets: give it in one place", s.origin,
                      s.key, axis.origin);
  }
  uint64_t rows = groups.size();
  for (const SweepAxis& axis : spec.grid) rows *= std::max<std::size_t>(axis.values.size(), 1);
  const uint64_t total = rows * std::max<std::size_t>(spec.seeds.size(), 1);
  if (total > static_cast<uint64_t>(kMaxSweepPoints))
    MNIST_THROW(UsageError, "the sweep has {} points, more than the {} it may have", total,
                kMaxSweepPoints);
  std::vector<SweepPoint> points;
  int row = 0;
  for (const auto& group : groups) {
    std::vector<std::size_t> at_value(spec.grid.size(), 0);
    for (;;) {
      std::vector<SweepSetting> settings = group;
      for (std::size_t a = 0; a < spec.grid.size(); ++a)
        settings.push_back(
            {spec.grid[a].key, spec.grid[a].values[at_value[a]], spec.grid[a].origin});
      const std::size_t seeds = std::max<std::size_t>(spec.seeds.size(), 1);
      for (std::size_t s = 0; s < seeds; ++s) {
        SweepPoint p;
        p.index = static_cast<int>(points.size());
        p.row = row;
        p.settings = settings;
        if (!spec.seeds.empty()) p.seed = spec.seeds[s];
        points.push_back(p);
      }
      ++row;
      // The last axis varies fastest, as nested loops written in the axes' order would.
      std::size_t a = spec.grid.size();
      while (a > 0 && ++at_value[a - 1] == spec.grid[a - 1].values.size()) at_value[--a] = 0;
      if (a == 0) break;
    }
  }
  return points;
}

}  // namespace mnist
