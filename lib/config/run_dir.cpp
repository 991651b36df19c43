#include "config/run_dir.hpp"

#include <cstdlib>

#include "core/error.hpp"

namespace mnist {

namespace {

// Walks `dir`, handing literal text and placeholder names to the callbacks; returns the rule
// broken, or "".
template <class Literal, class Placeholder>
std::string scan(const std::string& dir, Literal literal, Placeholder placeholder) {
  for (std::size_t i = 0; i < dir.size();) {
    if (dir[i] == '}') return fmt::format("'}}' at offset {} closes no placeholder", i);
    if (dir[i] != '{') {
      literal(dir[i]);
      ++i;
      continue;
    }
    const std::size_t close = dir.find('}', i);
    if (close == std::string::npos)
      return fmt::format("'{{' at offset {} is never closed; placeholders: {}", i,
                         kRunDirPlaceholders);
    const std::string key = dir.substr(i + 1, close - i - 1);
    if (key != "name" && key != "seed" && key != "job")
      return fmt::format("unknown placeholder '{{{}}}'; placeholders: {}", key,
                         kRunDirPlaceholders);
    placeholder(key);
    i = close + 1;
  }
  return "";
}

bool safe_label(const std::string& s) {
  return !s.empty() && s.find_first_not_of(
                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "0123456789._-") == std::string::npos;
}

}  // namespace

std::string run_dir_template_error(const std::string& dir) {
  return scan(
      dir, [](char) {}, [](const std::string&) {});
}

std::string job_label(const std::function<const char*(const char*)>& env) {
  auto get = [&](const char* var) -> std::string {
    const char* v = env ? env(var) : std::getenv(var);
    if (v == nullptr || *v == '\0') return "";
    // The value becomes part of a path: a '/' or '..' from a mangled environment must not move
    // the run elsewhere.
    if (!safe_label(v) || std::string(v) == "." || std::string(v) == "..")
      MNIST_THROW(ConfigError,
                  "output.dir's {{job}}: {}='{}' is not allowed: it must use only letters, digits, "
                  "'.', '_' and '-'",
                  var, v);
    return v;
  };
  const std::string array_job = get("SLURM_ARRAY_JOB_ID"), task = get("SLURM_ARRAY_TASK_ID");
  if (!array_job.empty() && !task.empty()) return array_job + "_" + task;
  const std::string job = get("SLURM_JOB_ID");
  return job.empty() ? "local" : job;
}

std::string expand_run_dir(const std::string& dir, const std::string& name, uint64_t seed,
                           const std::string& job) {
  std::string out;
  const std::string error = scan(
      dir, [&](char c) { out += c; },
      [&](const std::string& key) {
        out += key == "name" ? name : key == "seed" ? std::to_string(seed) : job;
      });
  if (!error.empty()) MNIST_THROW(ConfigError, "output.dir: '{}' is not allowed: {}", dir, error);
  return out;
}

}  // namespace mnist
