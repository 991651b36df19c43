// The layer-kind table (layer_kinds.hpp) and the readers of each kind's options.

#include "config/layer_kinds.hpp"

#include <limits>

#include "core/error.hpp"

namespace mnist::config_detail {

InitSpec parse_init(const Reporter& r, const YAML::Node& node, const std::string& path,
                    const InitSpec& base) {
  InitSpec spec = base;
  if (node.IsScalar()) {
    InitKind kind = read_choice(r, node, path, spellings(InitKind{}));
    if (kind != spec.kind) spec = InitSpec{kind};
    return spec;
  }
  Section s(r, node, path, init_keys());
  if (!s.has("type"))
    r.fail(node, path,
           "an init map needs 'type' (one of: " + join(spelling_names<InitKind>()) + ")");
  InitKind kind = spec.kind;
  s.choice("type", kind);
  if (kind != spec.kind) spec = InitSpec{kind};
  if (kind != InitKind::truncated_normal) {
    s.forbid({"mean", "stddev"}, "here: only truncated_normal takes mean and stddev");
  }
  s.number("mean", spec.mean, Range{});
  s.number("stddev", spec.stddev, above(0));
  return spec;
}

const std::vector<std::string>& init_keys() {
  static const std::vector<std::string> keys = {"type", "mean", "stddev"};
  return keys;
}

const std::vector<std::string>& batch_norm_keys() {
  static const std::vector<std::string> keys = {"decay", "epsilon", "center", "scale"};
  return keys;
}

void parse_batch_norm_options(const Section& s, LayerSpec& spec) {
  s.number("decay", spec.decay, half_open(0, 1));
  s.number("epsilon", spec.epsilon, above(0));
  s.boolean("center", spec.center);
  s.boolean("scale", spec.scale);
}

namespace {

LayerSpec base_spec(const LayerContext& ctx, LayerKind kind) {
  LayerSpec spec;
  spec.kind = kind;
  spec.yaml_path = ctx.path;
  spec.yaml_line = ctx.line;
  spec.init = ctx.defaults.init;
  return spec;
}

// The slim shorthand of conv2d / dense: `batchnorm` (true or a map of batch-norm options) and
// `activation: relu` become batch_norm / relu entries after the layer. With a normalizer the
// layer's bias defaults to off, as slim does: batch norm's beta would absorb it anyway.
void parse_weighted_tail(const LayerContext& ctx, const Section& s, LayerSpec& spec,
                         std::vector<LayerSpec>& out) {
  if (s.has("init")) spec.init = parse_init(ctx.r, s.value("init"), s.child("init"), spec.init);
  bool with_bn = false;
  LayerSpec bn = base_spec(ctx, LayerKind::batch_norm);
  const LayerSpec& d = ctx.defaults.batch_norm;
  bn.decay = d.decay;
  bn.epsilon = d.epsilon;
  bn.center = d.center;
  bn.scale = d.scale;
  bn.yaml_path = s.child("batchnorm");
  bn.yaml_line = s.key_line("batchnorm");
  if (s.has("batchnorm")) {
    YAML::Node v = s.value("batchnorm");
    if (v.IsMap()) {
      with_bn = true;
      parse_batch_norm_options(Section(ctx.r, v, s.child("batchnorm"), batch_norm_keys()), bn);
    } else if (is_plain_scalar(v) && (v.Scalar() == "true" || v.Scalar() == "false")) {
      with_bn = v.Scalar() == "true";
    } else {
      ctx.r.fail_value(
          v, s.child("batchnorm"),
          "must be true, false or a map of batch-norm options (" + join(batch_norm_keys()) + ")");
    }
  }
  spec.bias = !with_bn;
  s.boolean("bias", spec.bias);
  bool with_relu = false;
  if (s.has("activation")) {
    with_relu = read_choice(ctx.r, s.value("activation"), s.child("activation"),
                            std::vector<Spelling<bool>>{{"relu", true}, {"none", false}});
  }
  out.push_back(spec);
  if (with_bn) out.push_back(bn);
  if (with_relu) {
    LayerSpec relu = base_spec(ctx, LayerKind::relu);
    relu.yaml_path = s.child("activation");
    relu.yaml_line = s.key_line("activation");
    out.push_back(relu);
  }
}

void parse_conv2d(const LayerContext& ctx, const Section& s, std::vector<LayerSpec>& out) {
  LayerSpec spec = base_spec(ctx, LayerKind::conv2d);
  for (const char* required : {"filters", "kernel"}) {
    if (!s.has(required))
      ctx.r.fail_at(s.mark(), s.path(), fmt::format("'{}' is required", required));
  }
  s.integer("filters", spec.filters, 1, kMaxSizeKey);
  s.integer("kernel", spec.kernel, 1, kMaxSizeKey);
  s.integer("stride", spec.stride, 1, kMaxSizeKey);
  if (s.has("padding")) {
    YAML::Node v = s.value("padding");
    const std::string rule = fmt::format(
        "must be same, valid or an integer in [0, {}] (pixels on each side)", kMaxSizeKey);
    if (is_plain_scalar(v) && v.Scalar() == "same") {
      spec.padding = PaddingMode::same;
    } else if (is_plain_scalar(v) && v.Scalar() == "valid") {
      spec.padding = PaddingMode::valid;
    } else if (is_plain_scalar(v) && !v.Scalar().empty() &&
               v.Scalar().find_first_not_of("0123456789") == std::string::npos) {
      spec.padding = PaddingMode::explicit_pixels;
      spec.padding_pixels =
          static_cast<int>(read_integer(ctx.r, v, s.child("padding"), 0, kMaxSizeKey));
    } else {
      ctx.r.fail_value(v, s.child("padding"), rule);
    }
  }
  parse_weighted_tail(ctx, s, spec, out);
}

void parse_dense(const LayerContext& ctx, const Section& s, std::vector<LayerSpec>& out) {
  LayerSpec spec = base_spec(ctx, LayerKind::dense);
  if (!s.has("units")) ctx.r.fail_at(s.mark(), s.path(), "'units' is required");
  s.integer("units", spec.units, 1, kMaxSizeKey);
  parse_weighted_tail(ctx, s, spec, out);
}

void parse_max_pool(const LayerContext& ctx, const Section& s, std::vector<LayerSpec>& out) {
  LayerSpec spec = base_spec(ctx, LayerKind::max_pool);
  s.integer("size", spec.pool_size, 1, kMaxSizeKey);
  spec.stride = spec.pool_size;  // non-overlapping windows unless told otherwise
  s.integer("stride", spec.stride, 1, kMaxSizeKey);
  out.push_back(spec);
}

void parse_batch_norm(const LayerContext& ctx, const Section& s, std::vector<LayerSpec>& out) {
  LayerSpec spec = base_spec(ctx, LayerKind::batch_norm);
  const LayerSpec& d = ctx.defaults.batch_norm;
  spec.decay = d.decay;
  spec.epsilon = d.epsilon;
  spec.center = d.center;
  spec.scale = d.scale;
  parse_batch_norm_options(s, spec);
  out.push_back(spec);
}

void parse_dropout(const LayerContext& ctx, const Section& s, std::vector<LayerSpec>& out) {
  LayerSpec spec = base_spec(ctx, LayerKind::dropout);
  // rate 1 would drop everything and make the inverted-dropout scale 1/(1-rate) infinite.
  s.number("rate", spec.rate, half_open(0, 1));
  out.push_back(spec);
}

void parse_no_options(LayerKind kind, const LayerContext& ctx, std::vector<LayerSpec>& out) {
  out.push_back(base_spec(ctx, kind));
}
void parse_relu(const LayerContext& ctx, const Section&, std::vector<LayerSpec>& out) {
  parse_no_options(LayerKind::relu, ctx, out);
}
void parse_flatten(const LayerContext& ctx, const Section&, std::vector<LayerSpec>& out) {
  parse_no_options(LayerKind::flatten, ctx, out);
}

// ---- what each kind writes back --------------------------------------------------------------

// Shortest text that reads back as the same value ({} is fmt's round-trip format).
template <class T>
std::string num(T v) {
  return fmt::format("{}", v);
}
std::string boolean(bool b) {
  return b ? "true" : "false";
}

// The initializer of conv2d and dense: mean and stddev mean something only for truncated_normal
// (the reader rejects them elsewhere), so other kinds do not write the defaults they carry.
std::optional<std::string> init_type(const LayerSpec& l) {
  return to_string(l.init.kind);
}
std::optional<std::string> init_mean(const LayerSpec& l) {
  if (l.init.kind != InitKind::truncated_normal) return std::nullopt;
  return num(l.init.mean);
}
std::optional<std::string> init_stddev(const LayerSpec& l) {
  if (l.init.kind != InitKind::truncated_normal) return std::nullopt;
  return num(l.init.stddev);
}

std::optional<std::string> filters(const LayerSpec& l) {
  return num(l.filters);
}
std::optional<std::string> units(const LayerSpec& l) {
  return num(l.units);
}
std::optional<std::string> kernel(const LayerSpec& l) {
  return num(l.kernel);
}
std::optional<std::string> stride(const LayerSpec& l) {
  return num(l.stride);
}
std::optional<std::string> padding(const LayerSpec& l) {
  if (l.padding == PaddingMode::explicit_pixels) return num(l.padding_pixels);
  return std::string(to_string(l.padding));
}
std::optional<std::string> bias(const LayerSpec& l) {
  return boolean(l.bias);
}
std::optional<std::string> pool_size(const LayerSpec& l) {
  return num(l.pool_size);
}
std::optional<std::string> decay(const LayerSpec& l) {
  return num(l.decay);
}
std::optional<std::string> epsilon(const LayerSpec& l) {
  return num(l.epsilon);
}
std::optional<std::string> center(const LayerSpec& l) {
  return boolean(l.center);
}
std::optional<std::string> scale(const LayerSpec& l) {
  return boolean(l.scale);
}
std::optional<std::string> rate(const LayerSpec& l) {
  return num(l.rate);
}

std::vector<std::string> kind_names() {
  std::vector<std::string> names;
  for (const auto& k : layer_kinds()) names.push_back(k.name);
  return names;
}

}  // namespace

// The one table of layer kinds. A new kind is a new row.
const std::vector<LayerKindRow>& layer_kinds() {
  static const std::vector<LayerKindRow> table = {
      {"conv2d",
       LayerKind::conv2d,
       {"filters", "kernel", "stride", "padding", "bias", "init", "batchnorm", "activation"},
       parse_conv2d,
       {{"filters", filters},
        {"kernel", kernel},
        {"stride", stride},
        {"padding", padding},
        {"bias", bias},
        {"init.type", init_type},
        {"init.mean", init_mean},
        {"init.stddev", init_stddev}}},
      {"max_pool",
       LayerKind::max_pool,
       {"size", "stride"},
       parse_max_pool,
       {{"size", pool_size}, {"stride", stride}}},
      {"batch_norm",
       LayerKind::batch_norm,
       batch_norm_keys(),
       parse_batch_norm,
       {{"decay", decay}, {"epsilon", epsilon}, {"center", center}, {"scale", scale}}},
      {"relu", LayerKind::relu, {}, parse_relu, {}},
      {"dense",
       LayerKind::dense,
       {"units", "bias", "init", "batchnorm", "activation"},
       parse_dense,
       {{"units", units},
        {"bias", bias},
        {"init.type", init_type},
        {"init.mean", init_mean},
        {"init.stddev", init_stddev}}},
      {"dropout", LayerKind::dropout, {"rate"}, parse_dropout, {{"rate", rate}}},
      {"flatten", LayerKind::flatten, {}, parse_flatten, {}},
  };
  return table;
}

const LayerKindRow& layer_kind(LayerKind kind) {
  for (const LayerKindRow& row : layer_kinds()) {
    if (row.kind == kind) return row;
  }
  MNIST_CHECK(false, "layer kind {} has no row in the layer-kind table", static_cast<int>(kind));
  return layer_kinds().front();  // unreachable
}

std::vector<std::string> layer_keys() {
  std::vector<std::string> keys;
  for (const LayerKindRow& row : layer_kinds()) {
    const std::string kind = std::string("model.layers[].") + row.name;
    keys.push_back(kind);
    for (const std::string& option : row.keys) {
      keys.push_back(kind + "." + option);
      // The options that may be maps of their own, read by parse_weighted_tail.
      const std::vector<std::string>* nested = nullptr;
      if (option == "init") nested = &init_keys();
      if (option == "batchnorm") nested = &batch_norm_keys();
      if (nested == nullptr) continue;
      for (const std::string& key : *nested) keys.push_back(kind + "." + option + "." + key);
    }
  }
  return keys;
}

void parse_layers(const Reporter& r, const Section& model, const ModelDefaults& defaults,
                  std::vector<LayerSpec>& out) {
  const std::string path = model.child("layers");
  if (!model.has("layers")) r.fail_at(model.mark(), model.path(), "'layers' is required");
  YAML::Node list = model.value("layers");
  if (!list.IsSequence() || list.size() == 0) {
    r.fail_value(list, path,
                 "must be a non-empty list of layers like `- conv2d: {filters: 6, "
                 "kernel: 5}`");
  }
  for (size_t i = 0; i < list.size(); ++i) {
    YAML::Node item = list[i];
    std::string item_path = fmt::format("{}[{}]", path, i);
    const std::string shape_rule = fmt::format(
        "a layer is a map with one key, its kind, like `- relu: {{}}` or `- dense: {{units: 10}}`; "
        "kinds: {}",
        join(kind_names()));
    if (!item.IsMap()) r.fail_value(item, item_path, shape_rule);
    if (item.size() != 1) {
      std::vector<std::string> keys;
      for (auto it = item.begin(); it != item.end(); ++it) keys.push_back(it->first.Scalar());
      r.fail(item, item_path,
             fmt::format("a map with {} keys ({}) is not allowed: {}", keys.size(), join(keys),
                         shape_rule));
    }
    const YAML::Node key = item.begin()->first;
    const YAML::Node options = item.begin()->second;
    const LayerKindRow* entry = nullptr;
    for (const auto& k : layer_kinds()) {
      if (key.IsScalar() && key.Scalar() == k.name) entry = &k;
    }
    if (entry == nullptr) {
      std::string name = key.IsScalar() ? key.Scalar() : "?";
      r.fail_at(key.Mark(), item_path,
                fmt::format("unknown layer '{}';{} known: {}", name,
                            did_you_mean(name, kind_names()), join(kind_names())));
    }
    std::string options_path = item_path + "." + entry->name;
    Section s(r, options, options_path, entry->keys, key.Mark());
    LayerContext ctx{r, defaults, item_path, item.Mark().line + 1};
    entry->parse(ctx, s, out);
  }
}

}  // namespace mnist::config_detail

namespace mnist {

// LayerKind's spellings come from the layer-kind rows, so a kind's name is written once.
const std::vector<Spelling<LayerKind>>& spellings(LayerKind) {
  static const std::vector<Spelling<LayerKind>> rows = [] {
    std::vector<Spelling<LayerKind>> out;
    for (const auto& row : config_detail::layer_kinds()) out.push_back({row.name, row.kind});
    return out;
  }();
  return rows;
}

}  // namespace mnist
