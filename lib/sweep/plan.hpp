#pragma once
// A sweep's points checked before anything starts, and where each one's files live.
//
// Every point is read by the config reader with its settings and the slot's placement (the same
// --set texts its process gets), its network built and its memory checked as a run checks it; the
// first point that fails stops the sweep with a ConfigError naming the point, the axis and the
// value (and how many points fail), so nothing runs.
//
// The sweep's folder:
//   sweep.txt            the sweep as run: the base config, the settings, one line per point
//   points/<NAME>/       each point's run directory (config.yaml, metrics.jsonl, summary.json,
//                        checkpoints/), NAME = "<index>-<settings>-<hash>"
//   logs/<NAME>.log      the point's stdout and stderr
//   logs/<NAME>.json     how its last process ended: exit code, message, wall time
//   results.md, results.csv, points.csv   the table (results.hpp)
// The hash is of the point's resolved config without its placement (devices.threads, devices.gpus,
// output.dir), so rerunning the same sweep finds each point's folder whatever the slots, and a
// point whose config changed (an edited base config) gets a new one.

#include <cstdint>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "sweep/spec.hpp"

namespace mnist {

struct PlannedPoint {
  SweepPoint point;
  Experiment experiment;       // resolved, without the placement
  std::string hash;            // 8 hex digits of the resolved config (placement left out)
  std::string name;            // its folder's name under points/ and logs/
  uint64_t replica_bytes = 0;  // one replica's memory estimate (train/run_memory.hpp)
  int replicas = 1;            // devices.cpu_workers (CPU) or its GPUs
  uint64_t dataset_bytes = 0;  // its data's pixels and labels (0 for a custom dataset)
  std::string run_dir(const std::string& sweep_dir) const;
  std::string log_path(const std::string& sweep_dir) const;
  std::string status_path(const std::string& sweep_dir) const;
};

// "003-lr=0.01-batch_per_device=256-seed=1-1a2b3c4d": the index, each setting with the last part
// of its key, and the hash, in characters safe in a path ([A-Za-z0-9._=-], others as '_').
std::string point_folder_name(const SweepPoint& point, const std::string& hash, int points);

// The hash of a resolved experiment with its placement keys reset to the defaults.
std::string sweep_config_hash(const Experiment& experiment);

// Reads the base config (spec.config_path with spec's --set / --unset), for the sweep's name and
// backend. Throws ConfigError as a run would.
Experiment load_base_experiment(const SweepSpec& spec, const std::string& data_root);

// The sweep's folder: spec.out_dir, else runs/<base name>-sweep.
std::string sweep_dir(const SweepSpec& spec, const Experiment& base);

// Reads and checks every point (with `placement` appended to its --set texts: the slot's
// devices.threads or devices.gpus) and, for points on the CPU, their memory times `concurrent`
// points at once against the host memory available. Throws ConfigError naming the first failing
// point, its axis and value, and the count of failing points.
std::vector<PlannedPoint> plan_points(const SweepSpec& spec, const std::vector<SweepPoint>& points,
                                      const std::vector<std::string>& placement,
                                      const std::string& data_root, int concurrent);

// The setting of `point` a config error message is about: the one whose --set text it names
// ("--set 'KEY=VALUE'"), else one whose key it names; "" when it names none (a combination).
std::string axis_named_by(const SweepPoint& point, const std::string& message);

}  // namespace mnist
