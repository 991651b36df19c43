#include "config/data_root.hpp"

#include <cstdlib>

namespace mnist {

std::string data_root(const std::string& option,
                      const std::function<const char*(const char*)>& env) {
  if (!option.empty()) return option;
  const char* v = env ? env("MNIST_DATA") : std::getenv("MNIST_DATA");
  return v == nullptr ? "" : v;
}

void apply_data_root(DataConfig& data, const std::string& root) {
  if (root.empty()) return;
  // "data/mnist" and "./data/mnist" mean the default; both move.
  const std::string fallback = "data/" + data.dataset;
  if (data.dir != fallback && data.dir != "./" + fallback) return;
  data.dir = root + (root.back() == '/' ? "" : "/") + data.dataset;
}

}  // namespace mnist
