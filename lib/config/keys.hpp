#pragma once
// The config's keys as a list, for checking the documentation against the reader (part of
// lib/config's public face, beside experiment.hpp).

#include <string>
#include <vector>

namespace mnist {

// Every key a config file may hold, as dotted YAML paths, from the tables the readers check keys
// against: the top level's ("seed", "data"), each section's ("train.batch_per_device",
// "data.files.train_images"), and model.layers' with "[]" for any item ("model.layers[].relu",
// "model.layers[].conv2d.padding", "model.layers[].dense.init.type"). docs/configuration.md
// documents each one (tests/unit/test_docs.cpp checks it).
std::vector<std::string> config_keys();

}  // namespace mnist
