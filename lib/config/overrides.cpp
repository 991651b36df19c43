// --set / --unset: edits of the YAML tree made before the schema reads it (overrides.hpp).

#include "config/overrides.hpp"

#include "core/error.hpp"

namespace mnist::config_detail {
namespace {

struct PathToken {
  std::string key;  // empty for an index
  size_t index = 0;
};

// "model.layers[2].dense.units" -> model, layers, [2], dense, units.
std::vector<PathToken> parse_override_path(const std::string& path, const std::string& where) {
  std::vector<PathToken> tokens;
  size_t i = 0;
  auto bad = [&](const std::string& why) {
    MNIST_THROW(ConfigError,
                "{}: '{}' is not a valid key path ({}); write e.g. train.steps=50 or "
                "model.layers[2].dense.units=50",
                where, path, why);
  };
  while (i < path.size()) {
    if (path[i] == '[') {
      size_t close = path.find(']', i);
      std::string digits = close == std::string::npos ? "" : path.substr(i + 1, close - i - 1);
      if (tokens.empty() || digits.empty() || digits.size() > 6 ||
          digits.find_first_not_of("0123456789") != std::string::npos) {
        bad(fmt::format("bad list index at character {}", i + 1));
      }
      tokens.push_back({"", std::stoul(digits)});
      i = close + 1;
    } else {
      if (!tokens.empty()) {
        if (path[i] != '.') bad(fmt::format("expected '.' or '[' at character {}", i + 1));
        ++i;
      }
      size_t end = path.find_first_of(".[", i);
      if (end == std::string::npos) end = path.size();
      if (end == i) bad(fmt::format("empty key at character {}", i + 1));
      tokens.push_back({path.substr(i, end - i), 0});
      i = end;
    }
  }
  if (tokens.empty()) bad("it is empty");
  return tokens;
}

bool map_has_key(const YAML::Node& map, const std::string& key) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return true;
  }
  return false;
}

// Keys of which a config gives exactly one: an override of one replaces the other, so
// `--set train.global_batch=300` works on a config that has train.batch_per_device.
constexpr std::pair<const char*, const char*> kExclusiveKeys[] = {
    {"train.steps", "train.epochs"},
    {"train.batch_per_device", "train.global_batch"},
};

// The other key of an exclusive pair, or "" when `path` is in none.
std::string exclusive_partner(const std::string& path) {
  for (const auto& [a, b] : kExclusiveKeys) {
    if (path == a) return b;
    if (path == b) return a;
  }
  return "";
}

// Removes "section.key" from the tree if it is there (only top-level sections hold such keys).
void erase_key(YAML::Node& root, const std::string& path) {
  const std::size_t dot = path.find('.');
  YAML::Node section = root[path.substr(0, dot)];
  if (section.IsMap()) section.remove(path.substr(dot + 1));
}

// Writes one "key.path=value" into the tree. Keys that do not exist are created (the schema check
// that follows then rejects unknown ones with a hint); list indices must exist.
}  // namespace

void apply_override(YAML::Node& root, const std::string& text, Reporter& r,
                    const std::string& source) {
  std::string where = fmt::format("{}: --set '{}'", source, text);
  size_t eq = text.find('=');
  if (eq == std::string::npos) {
    MNIST_THROW(ConfigError, "{}: an override is key.path=value, e.g. train.steps=50", where);
  }
  std::string key_path = text.substr(0, eq);
  std::vector<PathToken> tokens = parse_override_path(key_path, where);
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& ex) {
    MNIST_THROW(ConfigError, "{}: the value is not valid YAML: {}", where, ex.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);

  std::string path, origin;
  YAML::Node cur = root;
  bool parent_is_list = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const PathToken& t = tokens[i];
    bool last = i + 1 == tokens.size();
    if (t.key.empty()) {
      if (!cur.IsSequence()) {
        MNIST_THROW(ConfigError, "{}: {} is {}, not a list; it has no item [{}]", where, path,
                    show(cur), t.index);
      }
      if (t.index >= cur.size()) {
        MNIST_THROW(ConfigError, "{}: {} has {} items (indices 0..{}); [{}] is out of range", where,
                    path, cur.size(), cur.size() - 1, t.index);
      }
      path += fmt::format("[{}]", t.index);
      if (last) {
        cur[t.index] = value;
      } else {
        YAML::Node next = cur[t.index];
        cur.reset(next);
      }
      parent_is_list = true;
    } else {
      std::string child = path.empty() ? t.key : path + "." + t.key;
      if (cur.IsDefined() && !cur.IsNull() && !cur.IsMap()) {
        MNIST_THROW(ConfigError, "{}: {} is {}, not a map; it has no key '{}'", where, path,
                    show(cur), t.key);
      }
      bool exists = cur.IsMap() && map_has_key(cur, t.key);
      if (!exists && parent_is_list && cur.IsMap() && cur.size() == 1) {
        // A layer item: its single key is its kind, and naming another kind would add a second.
        MNIST_THROW(ConfigError, "{}: {} is a '{}' layer, not '{}'", where, path,
                    cur.begin()->first.Scalar(), t.key);
      }
      if (!exists && origin.empty()) origin = child;
      path = child;
      if (last) {
        cur[t.key] = value;
      } else {
        YAML::Node next = cur[t.key];
        cur.reset(next);
      }
      parent_is_list = false;
    }
  }
  r.overrides.push_back({text, origin.empty() ? path : origin});
  const std::string partner = exclusive_partner(path);
  if (!partner.empty()) erase_key(root, partner);
}

// Removes one key (a map entry) from the tree: --unset train.epochs. The key must be there.
void apply_unset(YAML::Node& root, const std::string& key_path, const std::string& source) {
  const std::string where = fmt::format("{}: --unset '{}'", source, key_path);
  std::vector<PathToken> tokens = parse_override_path(key_path, where);
  if (tokens.back().key.empty())
    MNIST_THROW(ConfigError, "{}: only a key can be unset, not a list item", where);
  YAML::Node cur = root;
  std::string path;
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    const PathToken& t = tokens[i];
    YAML::Node next;
    if (t.key.empty()) {
      if (!cur.IsSequence() || t.index >= cur.size())
        MNIST_THROW(ConfigError, "{}: {} has no item [{}]", where, path, t.index);
      next = cur[t.index];
      path += fmt::format("[{}]", t.index);
    } else {
      if (!cur.IsMap() || !map_has_key(cur, t.key))
        MNIST_THROW(ConfigError, "{}: the config has no '{}'", where,
                    path.empty() ? t.key : path + "." + t.key);
      next = cur[t.key];
      path = path.empty() ? t.key : path + "." + t.key;
    }
    cur.reset(next);
  }
  if (!cur.IsMap() || !map_has_key(cur, tokens.back().key))
    MNIST_THROW(ConfigError, "{}: the config has no key '{}'{}", where, key_path,
                " (nothing to unset)");
  cur.remove(tokens.back().key);
}

}  // namespace mnist::config_detail
