#pragma once
// What a sweep is: a base config, settings that vary (a grid of axes, explicit groups, seeds) and
// the settings every point shares, from the command line (--grid, --list, --seeds, --set) or a
// sweep file's `sweep:` section; and its expansion into points, each one ordinary run.
//
// A point's settings are --set texts ("optimizer.lr=0.01"), applied by the config reader exactly
// as `mnist-train --set` applies them, so a sweep accepts every key and value a run does, and
// refuses the same ones with the same words (plan.hpp validates the points).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mnist {

// One setting of a point: a config key and its value, as YAML text ("0.01", "[0, 1]").
struct SweepSetting {
  std::string key, value;
  std::string origin;  // where it came from, for messages: "--grid optimizer.lr", "--list 2"
  std::string text() const { return key + "=" + value; }
};

// One axis of the grid: a key and the values it takes, in order.
struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
  std::string origin;  // "--grid optimizer.lr=..." or "sweep.grid.optimizer.lr in FILE"
};

struct SweepSpec {
  std::string config_path;             // the base config
  std::vector<std::string> overrides;  // --set for every point ("key=value")
  std::vector<std::string> unsets;     // --unset for every point
  // Explicit groups of settings (--list, sweep.list); none: one empty group. Each group is
  // crossed with the grid.
  std::vector<std::vector<SweepSetting>> groups;
  std::vector<SweepAxis> grid;  // crossed in order, the last axis varying fastest
  std::vector<uint64_t> seeds;  // each point runs once per seed; none: the config's own seed
  std::string out_dir;          // the sweep's folder; "" means runs/<config name>-sweep
};

// One point: one run of the base config with its settings and seed.
struct SweepPoint {
  int index = 0;  // 0-based, in expansion order (groups, then the grid, then seeds fastest)
  int row = 0;    // its settings' index: points differing only in their seed share a row
  std::vector<SweepSetting> settings;  // the group's, then one per grid axis
  std::optional<uint64_t> seed;
  // "optimizer.lr=0.01 train.batch_per_device=256 seed=1" (the config's seed: no seed= part).
  std::string label() const;
  // Its --set texts, settings then seed.
  std::vector<std::string> overrides() const;
};

// "a,b,[1,2],{x: 1, y: 2}" -> a | b | [1,2] | {x: 1, y: 2}: splits at the commas outside
// brackets, braces and quotes, trimming spaces. Empty parts are kept (the caller refuses them).
std::vector<std::string> split_top_level(const std::string& text);

// --grid KEY=V1,V2,...  Throws UsageError naming the option when it has no '=', no key, an empty
// value or a value given twice.
SweepAxis parse_grid_option(const std::string& text);
// --list KEY=V,KEY=V (the `number`th --list, 1-based, for messages). Throws UsageError when a part
// is not KEY=VALUE or a key is given twice.
std::vector<SweepSetting> parse_list_option(const std::string& text, int number);
// --seeds 1,2,3 (or a range 1-5). Throws UsageError for anything but non-negative integers, or a
// seed given twice.
std::vector<uint64_t> parse_seeds_option(const std::string& text);

// A sweep file: a YAML map with one key `sweep:` holding
//   config: BASE.yaml            (relative to the working directory, as --config is)
//   grid: {KEY: [V1, V2], ...}   (in the order written)
//   list: [{KEY: V, ...}, ...]
//   seeds: [1, 2, 3]
//   set: {KEY: V, ...}           (every point)
//   out: DIR
// Unknown keys are errors. Values are YAML, as after --set's '='. Throws ConfigError naming the
// file, line and key.
SweepSpec parse_sweep_file(const std::string& yaml_text, const std::string& source);
SweepSpec read_sweep_file(const std::string& path);

// Every point of `spec`: groups x grid x seeds. Throws UsageError when the grid sets a key a group
// also sets, or the expansion has more than kMaxSweepPoints points.
inline constexpr int kMaxSweepPoints = 10000;
std::vector<SweepPoint> expand_points(const SweepSpec& spec);

}  // namespace mnist
