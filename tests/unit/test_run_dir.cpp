// output.dir's placeholders (config/run_dir.hpp): expansion, the {job} value each environment
// gives, and the templates the config reader refuses with the key's line.
#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "config/experiment.hpp"
#include "config/run_dir.hpp"
#include "core/error.hpp"

namespace {

std::function<const char*(const char*)> fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("output.dir placeholders expand to name, seed and job", "[config][run_dir]") {
  CHECK(mnist::expand_run_dir("runs/{name}/s{seed}-{job}", "exp", 7, "12_3") == "runs/exp/s7-12_3");
  CHECK(mnist::expand_run_dir("runs/plain", "exp", 7, "j") == "runs/plain");
  CHECK_THROWS_AS(mnist::expand_run_dir("runs/{nope}", "exp", 7, "j"), mnist::ConfigError);
}

TEST_CASE("{job} is the array job and task, else the job id, else 'local'", "[config][run_dir]") {
  CHECK(mnist::job_label(fake_env({})) == "local");
  CHECK(mnist::job_label(fake_env({{"SLURM_JOB_ID", "55"}})) == "55");
  // Slurm's %A_%a: every task of one array has the same SLURM_ARRAY_JOB_ID.
  CHECK(mnist::job_label(fake_env({{"SLURM_JOB_ID", "57"},
                                   {"SLURM_ARRAY_JOB_ID", "55"},
                                   {"SLURM_ARRAY_TASK_ID", "2"}})) == "55_2");
  CHECK(mnist::job_label(fake_env({{"SLURM_JOB_ID", ""}})) == "local");
  for (const char* bad : {"..", "a/b", "x y"}) {
    INFO(bad);
    CHECK_THROWS_WITH(mnist::job_label(fake_env({{"SLURM_JOB_ID", bad}})),
                      Catch::Contains("SLURM_JOB_ID='" + std::string(bad) + "'"));
  }
}

TEST_CASE("a malformed output.dir template is a config error naming the key, line and rule",
          "[config][run_dir]") {
  CHECK(mnist::run_dir_template_error("runs/{name}-{seed}-{job}").empty());
  CHECK(mnist::run_dir_template_error("runs/{name").find("never closed") != std::string::npos);
  CHECK(mnist::run_dir_template_error("runs/name}").find("closes no placeholder") !=
        std::string::npos);
  const std::string yaml = R"(name: t
model:
  layers:
    - flatten: {}
    - dense: {units: 10}
train: {steps: 1, batch_per_device: 4}
output: {dir: "runs/{name}-{sed}"}
)";
  CHECK_THROWS_WITH(mnist::parse_experiment(yaml, "t.yaml"),
                    Catch::Contains("output.dir") && Catch::Contains("t.yaml:7") &&
                        Catch::Contains("unknown placeholder '{sed}'") &&
                        Catch::Contains("{name}, {seed}, {job}"));
}
