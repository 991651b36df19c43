#pragma once
// The experiment's sections read from a YAML tree (overrides already applied): the schema itself.
// Internal to lib/config; experiment.hpp's parse_experiment / load_experiment are the public face.

#include <yaml-cpp/yaml.h>

#include "config/experiment.hpp"
#include "config/yaml_reader.hpp"

namespace mnist::config_detail {

// Reads and validates every section of `root`; throws ConfigError through `r` at the first
// problem, so nothing is returned until the whole tree has passed.
Experiment build_experiment(const Reporter& r, const YAML::Node& root);

}  // namespace mnist::config_detail
