// YAML experiment files -> Experiment, with every key checked: the entry points of lib/config.
//
// How it works: the text is parsed into a yaml-cpp tree; each --unset and --set is applied to that
// tree (overrides.cpp); then one pass walks the tree section by section (sections.cpp, with the
// layer kinds in layer_kinds.cpp), rejecting unknown and duplicated keys, checking each value's
// type and range (yaml_reader.cpp), filling defaults and expanding the layer shorthand. Nothing is
// returned until the whole file has passed, so the tool never touches a device with a half-valid
// config. Every error names the file, line:column (or the --set text the value came from), the
// YAML path, the value found and the rule it breaks. Writing back is emit.cpp (to_yaml); the
// canonical math-relevant text and hash are math_config.cpp.

#include "config/experiment.hpp"

#include <yaml-cpp/yaml.h>

#include "config/overrides.hpp"
#include "config/sections.hpp"
#include "config/yaml_reader.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"

namespace mnist {

Experiment parse_experiment(const std::string& yaml_text, const std::string& source_name,
                            const std::vector<std::string>& overrides,
                            const std::vector<std::string>& unsets) {
  config_detail::Reporter r(source_name);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& ex) {
    MNIST_THROW(ConfigError, "{}:{}:{}: not valid YAML: {}", source_name, ex.mark.line + 1,
                ex.mark.column + 1, ex.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  for (const auto& key : unsets) config_detail::apply_unset(root, key, source_name);
  for (const auto& o : overrides) config_detail::apply_override(root, o, r, source_name);
  Experiment e = config_detail::build_experiment(r, root);
  e.source_path = source_name;
  return e;
}

Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides,
                           const std::vector<std::string>& unsets) {
  std::string text;
  try {
    text = read_regular_file(path, kMaxConfigBytes, "config file");
  } catch (const DataError& e) {
    // The file is the config: the same words, the config's error class.
    throw ConfigError(e.what());
  }
  return parse_experiment(text, path, overrides, unsets);
}

}  // namespace mnist
