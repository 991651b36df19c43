#pragma once
// output.dir's placeholders: {name}, {seed} and {job}, so that the tasks of one `sbatch --array`
// job (or runs of several seeds) each get a folder of their own from one config.

#include <cstdint>
#include <functional>
#include <string>

namespace mnist {

// For messages: the placeholders output.dir may hold.
inline constexpr const char* kRunDirPlaceholders = "{name}, {seed}, {job}";

// "" when `dir` is a well-formed template, else the rule it breaks (an unknown placeholder, a
// brace left open or closed alone), for the config reader to report with the key's line.
std::string run_dir_template_error(const std::string& dir);

// The value of {job}, from the environment `env` reads (getenv by default):
//   SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID set: "<array job>_<task>" (Slurm's own %A_%a);
//   else SLURM_JOB_ID set: that id (a requeued job keeps it, so --resume auto finds its folder);
//   else "local" (a rerun on a workstation names the same folder, which a fresh run then refuses
//   to reuse; use {seed} or another output.dir to keep runs apart).
// Throws ConfigError when a variable holds anything but letters, digits, '.', '_' and '-'.
std::string job_label(const std::function<const char*(const char*)>& env = nullptr);

// `dir` with its placeholders replaced. Throws ConfigError if `dir` is not a well-formed template.
std::string expand_run_dir(const std::string& dir, const std::string& name, uint64_t seed,
                           const std::string& job);

}  // namespace mnist
