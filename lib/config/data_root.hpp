#pragma once
// The data root: where data.dir's default, data/<dataset>, is looked for, so an installed tool
// (or a batch job started elsewhere) finds its data whatever the working directory.

#include <functional>
#include <string>

#include "config/experiment.hpp"

namespace mnist {

// The root in effect: `option` (--data-root) if given, else the MNIST_DATA variable that `env`
// reads (getenv by default), else "" (data/ of the working directory, as before).
std::string data_root(const std::string& option,
                      const std::function<const char*(const char*)>& env = nullptr);

// A data.dir of data/<dataset> (the default, written or not) becomes <root>/<dataset>; any other
// data.dir, and explicit data.files paths, stay as written. Nothing changes when `root` is "".
void apply_data_root(DataConfig& data, const std::string& root);

}  // namespace mnist
