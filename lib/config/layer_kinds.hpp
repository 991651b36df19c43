#pragma once
// The layer kinds of model.layers: one table row per kind carrying everything the schema knows
// about it: its YAML name, the option keys it accepts, its reader, and the options to_yaml writes
// back and the math config hashes (in one list, so the two cannot disagree on a field).
//
// A new layer kind is a LayerKind member, its LayerSpec fields, and one row here (plus, in model/,
// its shape rule and layer class). Internal to lib/config.

#include <optional>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "config/yaml_reader.hpp"

namespace mnist::config_detail {

// Model-wide defaults that layer options start from.
struct ModelDefaults {
  InitSpec init;
  LayerSpec batch_norm;  // only decay / epsilon / center / scale are used
};

// Where the layer being read sits, for its spec's provenance and for messages.
struct LayerContext {
  const Reporter& r;
  const ModelDefaults& defaults;
  std::string path;  // "model.layers[3]"
  int line;          // 1-based line of the item
};

// One option of a layer as written back: to_yaml's `key: text` in the layer's flow map and the
// math config's `model.layers[i].key=text`. A dotted key ("init.type") is a nested map in YAML.
struct LayerOption {
  const char* key;
  // The option's canonical text for `spec` (numbers in fmt's shortest round-trip form), or nullopt
  // when the option does not apply to this spec (init.mean for an initializer other than
  // truncated_normal).
  std::optional<std::string> (*text)(const LayerSpec& spec);
};

struct LayerKindRow {
  const char* name;  // the YAML key of the item: `- conv2d: {...}`
  LayerKind kind;
  std::vector<std::string> keys;  // what its options map accepts (shorthand keys included)
  // Appends the spec(s) of one item: conv2d / dense expand `batchnorm` and `activation` into
  // batch_norm / relu entries after the layer.
  void (*parse)(const LayerContext& ctx, const Section& options, std::vector<LayerSpec>& out);
  std::vector<LayerOption> options;  // written by to_yaml and math_config_text, in this order
};

// Every kind, in the order messages list them.
const std::vector<LayerKindRow>& layer_kinds();
const LayerKindRow& layer_kind(LayerKind kind);

// `init:` is either an initializer name or {type, mean, stddev}; mean/stddev belong to
// truncated_normal only. Unset fields start from `base` (the model-wide default).
InitSpec parse_init(const Reporter& r, const YAML::Node& node, const std::string& path,
                    const InitSpec& base);

// The keys of an initializer map (model.init, a layer's `init: {...}`).
const std::vector<std::string>& init_keys();

// The keys of a batch-norm options map (model.batch_norm, `batchnorm: {...}`, `- batch_norm:`).
const std::vector<std::string>& batch_norm_keys();
void parse_batch_norm_options(const Section& s, LayerSpec& spec);

// Every key of model.layers' items as dotted paths, "[]" for any item: each kind
// ("model.layers[].relu"), its options ("model.layers[].conv2d.padding") and the keys of its
// option maps ("model.layers[].dense.init.type", "model.layers[].conv2d.batchnorm.decay").
std::vector<std::string> layer_keys();

// model.layers: a non-empty list of one-key maps, each read by its kind's row.
void parse_layers(const Reporter& r, const Section& model, const ModelDefaults& defaults,
                  std::vector<LayerSpec>& out);

}  // namespace mnist::config_detail
