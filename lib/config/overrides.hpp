#pragma once
// --set key.path=value and --unset key.path: edits of the parsed YAML tree, made before the
// schema reads it, so an override is checked by exactly the rules a line of the file is.
//
// An override's value is YAML ("train.steps=50", "devices.gpus=[0, 1]"); keys that do not exist
// are created (the schema then rejects unknown ones with a hint), list indices must exist. The
// Reporter records which subtree each override wrote, so later errors there name the --set text
// instead of a line of the file. An override of one of two exclusive keys (train.steps / epochs,
// train.batch_per_device / global_batch) removes the other. Internal to lib/config.

#include <string>

#include <yaml-cpp/yaml.h>

#include "config/yaml_reader.hpp"

namespace mnist::config_detail {

// Writes one "key.path=value" into `root`. Throws ConfigError naming `source` and the --set text.
void apply_override(YAML::Node& root, const std::string& text, Reporter& r,
                    const std::string& source);

// Removes one key (a map entry) from `root`: --unset train.epochs. The key must be there.
void apply_unset(YAML::Node& root, const std::string& key_path, const std::string& source);

}  // namespace mnist::config_detail
