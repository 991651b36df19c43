#pragma once
// The experiment's sections read from a YAML tree (overrides already applied): the schema itself.
// Internal to lib/config; experiment.hpp's parse_experiment / load_experiment are the public face.

#include <yaml-cpp/yaml.h>

#include "config/experiment.hpp"
#include "config/yaml_reader.hpp"

namespace mnist::config_detail {

// The keys one map of the experiment accepts, by its YAML path: "" is the top level, "data.files"
// the data section's files. Every map outside model.layers has a row (model.layers' items are
// layer_kinds.hpp's table).
struct SectionKeys {
  std::string path;
  std::vector<std::string> keys;
};
const std::vector<SectionKeys>& section_keys();
// The row of `path`; a path without one is a program error.
const std::vector<std::string>& keys_of(const std::string& path);

// Reads and validates every section of `root`; throws ConfigError through `r` at the first
// problem, so nothing is returned until the whole tree has passed.
Experiment build_experiment(const Reporter& r, const YAML::Node& root);

}  // namespace mnist::config_detail
