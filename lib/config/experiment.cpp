// YAML experiment files -> Experiment, with every key checked.
//
// How it works: the text is parsed into a yaml-cpp tree; each --set override is written into that
// tree (creating keys as needed); then one pass walks the tree section by section, rejecting
// unknown and duplicated keys, checking each value's type and range, filling defaults and expanding
// the layer shorthand. Nothing is returned until the whole file has passed, so the tool never
// touches a device with a half-valid config. Every error names the file, line:column (or the --set
// text the value came from), the YAML path, the value found and the rule it breaks.

#include "config/experiment.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "core/error.hpp"
#include "core/printable.hpp"

namespace mnist {
namespace {

// ---- where a value came from ------------------------------------------------------------------

// An override owns the subtree it wrote or created: errors under `path` point at the --set text,
// because line numbers inside the override's own YAML value would mean nothing in the file.
struct OverrideOrigin {
  std::string text;  // the whole "key.path=value" as given
  std::string path;  // YAML path of the first node the override replaced or created
};

bool path_within(const std::string& path, const std::string& prefix) {
  if (path.compare(0, prefix.size(), prefix) != 0) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.' || path[prefix.size()] == '[';
}

std::string join(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

// Optimal-string-alignment distance: Levenshtein plus adjacent transpositions, so "rleu" is one
// edit from "relu" (the usual typo).
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// " did you mean 'x'?" when one known word is close enough to be the intended one, else "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& known) {
  const std::string* best = nullptr;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const auto& k : known) {
    size_t dist = edit_distance(word, k);
    if (dist < best_distance) {
      best_distance = dist;
      best = &k;
    }
  }
  // Two edits, or a third of the word for long keys; never more than the word itself (that would
  // "correct" any short string to any short key).
  size_t limit = std::max<size_t>(2, word.size() / 3);
  if (best == nullptr || best_distance > limit || best_distance >= word.size()) return "";
  return fmt::format(" did you mean '{}'?", *best);
}

// A value as the user wrote it, for messages.
std::string show(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "an empty value";
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  const std::string& s = node.Scalar();
  bool plain_number = !s.empty() && node.Tag() == "?" &&
                      s.find_first_not_of("0123456789+-.eE") == std::string::npos;
  return plain_number ? s : "'" + printable(s) + "'";
}

class Reporter {
 public:
  explicit Reporter(std::string source) : source_(std::move(source)) {}
  std::vector<OverrideOrigin> overrides;

  std::string location(const std::string& path, const YAML::Mark& mark) const {
    // The last override wins in the tree, so it is the one to blame.
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
      if (path_within(path, it->path)) return fmt::format("{}: --set '{}'", source_, it->text);
    }
    if (mark.is_null()) return source_;
    return fmt::format("{}:{}:{}", source_, mark.line + 1, mark.column + 1);
  }

  // Where the value at `path` came from, for messages that name two keys: "from --set '...'" or
  // "at line N" (never "line 0" for a value that no line holds).
  std::string origin(const std::string& path, const YAML::Mark& mark) const {
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
      if (path_within(path, it->path)) return fmt::format("from --set '{}'", it->text);
    }
    return mark.is_null() ? std::string("in the file") : fmt::format("at line {}", mark.line + 1);
  }

  [[noreturn]] void fail_at(const YAML::Mark& mark, const std::string& path,
                            const std::string& message) const {
    MNIST_THROW(ConfigError, "{}: {}: {}", location(path, mark),
                path.empty() ? "(top level)" : path, message);
  }
  [[noreturn]] void fail(const YAML::Node& node, const std::string& path,
                         const std::string& message) const {
    fail_at(node.IsDefined() ? node.Mark() : YAML::Mark::null_mark(), path, message);
  }
  // "<path>: <value> is not allowed: <rule>"
  [[noreturn]] void fail_value(const YAML::Node& node, const std::string& path,
                               const std::string& rule) const {
    fail(node, path, fmt::format("{} is not allowed: {}", show(node), rule));
  }

 private:
  std::string source_;
};

// ---- scalar readers: each checks type and range and names the rule ------------------------------

bool is_plain_scalar(const YAML::Node& node) {
  // Quoted scalars carry the tag "!": `filters: "6"` is a string, not a number.
  return node.IsScalar() && node.Tag() == "?";
}

// `hi_is_rule`: whether `hi` belongs in the message; a cap that only reflects the field's C++ type
// is named only when a value actually exceeds it.
int64_t read_integer(const Reporter& r, const YAML::Node& node, const std::string& path, int64_t lo,
                     int64_t hi, bool hi_is_rule = true) {
  std::string rule = hi_is_rule ? fmt::format("must be an integer in [{}, {}]", lo, hi)
                                : fmt::format("must be an integer >= {}", lo);
  if (!is_plain_scalar(node)) r.fail_value(node, path, rule);
  const std::string& s = node.Scalar();
  size_t digits_from = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  if (s.size() == digits_from ||
      s.find_first_not_of("0123456789", digits_from) != std::string::npos) {
    r.fail_value(node, path, rule);
  }
  errno = 0;
  long long v = std::strtoll(s.c_str(), nullptr, 10);
  if (v < lo) r.fail_value(node, path, rule);
  if (errno == ERANGE || v > hi) {
    r.fail_value(node, path, fmt::format("must be an integer in [{}, {}]", lo, hi));
  }
  return v;
}

struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  bool lo_open = false;
  double hi = std::numeric_limits<double>::infinity();
  bool hi_open = false;
};
Range at_least(double lo) {
  return {lo, false, std::numeric_limits<double>::infinity(), false};
}
Range above(double lo) {
  return {lo, true, std::numeric_limits<double>::infinity(), false};
}
Range half_open(double lo, double hi) {
  return {lo, false, hi, true};
}

std::string describe(const Range& range) {
  bool has_lo = std::isfinite(range.lo), has_hi = std::isfinite(range.hi);
  if (has_lo && has_hi) {
    return fmt::format("must be a number in {}{}, {}{}", range.lo_open ? "(" : "[", range.lo,
                       range.hi, range.hi_open ? ")" : "]");
  }
  if (has_lo) return fmt::format("must be a number {} {}", range.lo_open ? ">" : ">=", range.lo);
  if (has_hi) return fmt::format("must be a number {} {}", range.hi_open ? "<" : "<=", range.hi);
  return "must be a finite number";
}

double read_number(const Reporter& r, const YAML::Node& node, const std::string& path,
                   const Range& range) {
  std::string rule = describe(range);
  if (!is_plain_scalar(node) || node.Scalar().empty()) r.fail_value(node, path, rule);
  const std::string& s = node.Scalar();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v)) {
    r.fail_value(node, path, rule);
  }
  if (v < range.lo || (range.lo_open && v == range.lo) || v > range.hi ||
      (range.hi_open && v == range.hi)) {
    r.fail_value(node, path, rule);
  }
  return v;
}

bool read_bool(const Reporter& r, const YAML::Node& node, const std::string& path) {
  if (is_plain_scalar(node) && node.Scalar() == "true") return true;
  if (is_plain_scalar(node) && node.Scalar() == "false") return false;
  r.fail_value(node, path, "must be true or false");
}

std::string read_string(const Reporter& r, const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar() || node.Scalar().empty())
    r.fail_value(node, path, "must be a non-empty string");
  return node.Scalar();
}

template <class E>
using Choices = std::vector<std::pair<std::string, E>>;

template <class E>
E read_choice(const Reporter& r, const YAML::Node& node, const std::string& path,
              const Choices<E>& choices) {
  std::vector<std::string> names;
  for (const auto& c : choices) names.push_back(c.first);
  if (node.IsScalar()) {
    for (const auto& c : choices) {
      if (c.first == node.Scalar()) return c.second;
    }
  }
  std::string hint = node.IsScalar() ? did_you_mean(node.Scalar(), names) : "";
  r.fail_value(node, path, fmt::format("must be one of: {};{}", join(names), hint));
}

template <class E>
const std::string& choice_name(const Choices<E>& choices, E value) {
  for (const auto& c : choices) {
    if (c.second == value) return c.first;
  }
  MNIST_CHECK(false, "enum value {} has no name", static_cast<int>(value));
  return choices.front().first;  // unreachable
}

const Choices<BackendChoice> kBackends = {{"auto", BackendChoice::auto_select},
                                          {"cpu", BackendChoice::cpu},
                                          {"cuda", BackendChoice::cuda}};
const Choices<std::string> kEngines = {
    {"native", "native"}, {"cublas", "cublas"}, {"cudnn", "cudnn"}, {"blas", "blas"}};
const Choices<BatchNormMode> kBatchNormModes = {{"local", BatchNormMode::local},
                                                {"sync", BatchNormMode::sync}};
const Choices<OptimizerKind> kOptimizers = {{"adam", OptimizerKind::adam},
                                            {"sgd", OptimizerKind::sgd}};
const Choices<AdamEpsilon> kAdamEpsilons = {{"pytorch", AdamEpsilon::pytorch},
                                            {"tensorflow", AdamEpsilon::tensorflow}};
const Choices<WeightDecayMode> kWeightDecayModes = {{"l2", WeightDecayMode::l2},
                                                    {"decoupled", WeightDecayMode::decoupled}};
const Choices<ScheduleKind> kSchedules = {{"constant", ScheduleKind::constant},
                                          {"step", ScheduleKind::step},
                                          {"cosine", ScheduleKind::cosine}};
const Choices<LogFormat> kLogFormats = {{"standard", LogFormat::standard},
                                        {"seed", LogFormat::seed}};
const Choices<InitKind> kInits = {{"truncated_normal", InitKind::truncated_normal},
                                  {"he_normal", InitKind::he_normal},
                                  {"glorot_uniform", InitKind::glorot_uniform},
                                  {"zeros", InitKind::zeros}};
const Choices<std::string> kDatasets = {{"mnist", "mnist"},
                                        {"mnist-small", "mnist-small"},
                                        {"fashion-mnist", "fashion-mnist"},
                                        {"custom", "custom"}};

// ---- maps: known keys, duplicates, typed lookups -----------------------------------------------

// A YAML map being read as one config section. Construction rejects a non-map, duplicated keys and
// unknown keys, so the typed getters below only ever see keys the schema knows.
class Section {
 public:
  // `key_mark`: where the section's key is, for messages about an empty or absent section.
  Section(const Reporter& r, const YAML::Node& node, std::string path,
          std::vector<std::string> known, YAML::Mark key_mark = YAML::Mark::null_mark())
      : r_(r), node_(node), path_(std::move(path)), known_(std::move(known)), key_mark_(key_mark) {
    if (!node_.IsDefined() || node_.IsNull()) return;  // absent or empty: every key at its default
    if (!node_.IsMap()) {
      r_.fail_value(node_, path_, fmt::format("must be a map with keys: {}", join(known_)));
    }
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      // Copies, not references: yaml-cpp's iterator returns its pair through a temporary proxy,
      // so a reference to it->first dangles after this statement (AddressSanitizer:
      // stack-use-after-scope).
      const YAML::Node key = it->first;
      if (!key.IsScalar()) r_.fail_value(key, path_, "map keys must be plain words");
      const std::string name = key.Scalar();
      for (const auto& e : entries_) {
        if (e.name == name) {
          r_.fail_at(key.Mark(), child(name),
                     fmt::format("duplicate key '{}' (first given at line {})", name,
                                 e.key.Mark().line + 1));
        }
      }
      if (std::find(known_.begin(), known_.end(), name) == known_.end()) {
        std::string where = path_.empty() ? "at the top level" : "in " + path_;
        r_.fail_at(key.Mark(), child(name),
                   fmt::format("unknown key '{}' {};{} known keys: {}", name, where,
                               did_you_mean(name, known_), join(known_)));
      }
      entries_.push_back({name, key, it->second});
    }
  }

  const Reporter& reporter() const { return r_; }
  const std::string& path() const { return path_; }
  const YAML::Node& node() const { return node_; }
  YAML::Mark mark() const {
    // A null value's mark is wherever the parser stood next (often the following line).
    return node_.IsDefined() && !node_.IsNull() ? node_.Mark() : key_mark_;
  }
  std::string child(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  bool has(const std::string& key) const { return find(key) != nullptr; }
  YAML::Node value(const std::string& key) const {
    const Entry* e = find(key);
    return e ? e->value : YAML::Node(YAML::NodeType::Undefined);
  }
  int key_line(const std::string& key) const {
    const Entry* e = find(key);
    return e ? e->key.Mark().line + 1 : 0;
  }
  YAML::Mark key_mark(const std::string& key) const {
    const Entry* e = find(key);
    return e ? e->key.Mark() : mark();
  }
  Section section(const std::string& key, std::vector<std::string> known) const {
    return Section(r_, value(key), child(key), std::move(known), key_mark(key));
  }

  template <class Int>
  void integer(const std::string& key, Int& out, int64_t lo,
               int64_t hi = std::numeric_limits<int64_t>::max()) const {
    bool hi_is_rule = hi != std::numeric_limits<int64_t>::max();
    // The field's own type caps the range (seed is uint64_t but is read up to int64's maximum).
    if (std::numeric_limits<Int>::digits < 63) {
      hi = std::min<int64_t>(hi, static_cast<int64_t>(std::numeric_limits<Int>::max()));
    }
    if (has(key)) {
      out = static_cast<Int>(read_integer(r_, value(key), child(key), lo, hi, hi_is_rule));
    }
  }
  template <class Real>
  void number(const std::string& key, Real& out, const Range& range) const {
    if (has(key)) out = static_cast<Real>(read_number(r_, value(key), child(key), range));
  }
  void boolean(const std::string& key, bool& out) const {
    if (has(key)) out = read_bool(r_, value(key), child(key));
  }
  void text(const std::string& key, std::string& out) const {
    if (has(key)) out = read_string(r_, value(key), child(key));
  }
  template <class E>
  void choice(const std::string& key, E& out, const Choices<E>& choices) const {
    if (has(key)) out = read_choice(r_, value(key), child(key), choices);
  }
  // Keys that belong to another variant (momentum under adam): rejected, naming the variant.
  void forbid(const std::vector<std::string>& keys, const std::string& why) const {
    for (const auto& k : keys) {
      if (has(k)) r_.fail_at(key_mark(k), child(k), fmt::format("'{}' is not allowed {}", k, why));
    }
  }
  // Exactly one of a and b, naming both when the rule is broken.
  void exactly_one(const std::string& a, const std::string& b) const {
    if (has(a) && has(b)) {
      YAML::Mark ma = key_mark(a), mb = key_mark(b);
      bool b_later = mb.line > ma.line || (mb.line == ma.line && mb.column > ma.column);
      const std::string& later = b_later ? b : a;
      r_.fail_at(
          key_mark(later), path_,
          fmt::format("give exactly one of '{}' and '{}'; found both ({} {}, {} {})", a, b, a,
                      r_.origin(child(a), key_mark(a)), b, r_.origin(child(b), key_mark(b))));
    }
    if (!has(a) && !has(b)) {
      r_.fail_at(mark(), path_,
                 fmt::format("give exactly one of '{}' and '{}'; found neither", a, b));
    }
  }

 private:
  struct Entry {
    std::string name;
    YAML::Node key, value;
  };
  const Entry* find(const std::string& key) const {
    for (const auto& e : entries_) {
      if (e.name == key) return &e;
    }
    return nullptr;
  }

  const Reporter& r_;
  YAML::Node node_;
  std::string path_;
  std::vector<std::string> known_;
  YAML::Mark key_mark_;
  std::vector<Entry> entries_;
};

// ---- model --------------------------------------------------------------------------------------

// Model-wide defaults that layer options start from.
struct ModelDefaults {
  InitSpec init;
  LayerSpec batch_norm;  // only decay / epsilon / center / scale are used
};

// `init:` is either an initializer name or {type, mean, stddev}; mean/stddev belong to
// truncated_normal only. Unset fields start from `base` (the model-wide default).
InitSpec parse_init(const Reporter& r, const YAML::Node& node, const std::string& path,
                    const InitSpec& base) {
  InitSpec spec = base;
  if (node.IsScalar()) {
    InitKind kind = read_choice(r, node, path, kInits);
    if (kind != spec.kind) spec = InitSpec{kind};
    return spec;
  }
  Section s(r, node, path, {"type", "mean", "stddev"});
  if (!s.has("type"))
    r.fail(node, path,
           "an init map needs 'type' (one of: truncated_normal, "
           "he_normal, glorot_uniform, zeros)");
  InitKind kind = spec.kind;
  s.choice("type", kind, kInits);
  if (kind != spec.kind) spec = InitSpec{kind};
  if (kind != InitKind::truncated_normal) {
    s.forbid({"mean", "stddev"}, "here: only truncated_normal takes mean and stddev");
  }
  s.number("mean", spec.mean, Range{});
  s.number("stddev", spec.stddev, above(0));
  return spec;
}

const std::vector<std::string> kBatchNormKeys = {"decay", "epsilon", "center", "scale"};

void parse_batch_norm_options(const Section& s, LayerSpec& spec) {
  s.number("decay", spec.decay, half_open(0, 1));
  s.number("epsilon", spec.epsilon, above(0));
  s.boolean("center", spec.center);
  s.boolean("scale", spec.scale);
}

struct LayerContext {
  const Reporter& r;
  const ModelDefaults& defaults;
  std::string path;  // "model.layers[3]"
  int line;          // 1-based line of the item
};

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
      parse_batch_norm_options(Section(ctx.r, v, s.child("batchnorm"), kBatchNormKeys), bn);
    } else if (is_plain_scalar(v) && (v.Scalar() == "true" || v.Scalar() == "false")) {
      with_bn = v.Scalar() == "true";
    } else {
      ctx.r.fail_value(
          v, s.child("batchnorm"),
          "must be true, false or a map of batch-norm options (" + join(kBatchNormKeys) + ")");
    }
  }
  spec.bias = !with_bn;
  s.boolean("bias", spec.bias);
  bool with_relu = false;
  if (s.has("activation")) {
    with_relu = read_choice(ctx.r, s.value("activation"), s.child("activation"),
                            Choices<bool>{{"relu", true}, {"none", false}});
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
  s.integer("filters", spec.filters, 1);
  s.integer("kernel", spec.kernel, 1);
  s.integer("stride", spec.stride, 1);
  if (s.has("padding")) {
    YAML::Node v = s.value("padding");
    const char* rule = "must be same, valid or an integer >= 0 (pixels on each side)";
    if (is_plain_scalar(v) && v.Scalar() == "same") {
      spec.padding = PaddingMode::same;
    } else if (is_plain_scalar(v) && v.Scalar() == "valid") {
      spec.padding = PaddingMode::valid;
    } else if (is_plain_scalar(v) && !v.Scalar().empty() &&
               v.Scalar().find_first_not_of("0123456789") == std::string::npos) {
      spec.padding = PaddingMode::explicit_pixels;
      spec.padding_pixels = static_cast<int>(
          read_integer(ctx.r, v, s.child("padding"), 0, std::numeric_limits<int>::max(), false));
    } else {
      ctx.r.fail_value(v, s.child("padding"), rule);
    }
  }
  parse_weighted_tail(ctx, s, spec, out);
}

void parse_dense(const LayerContext& ctx, const Section& s, std::vector<LayerSpec>& out) {
  LayerSpec spec = base_spec(ctx, LayerKind::dense);
  if (!s.has("units")) ctx.r.fail_at(s.mark(), s.path(), "'units' is required");
  s.integer("units", spec.units, 1);
  parse_weighted_tail(ctx, s, spec, out);
}

void parse_max_pool(const LayerContext& ctx, const Section& s, std::vector<LayerSpec>& out) {
  LayerSpec spec = base_spec(ctx, LayerKind::max_pool);
  s.integer("size", spec.pool_size, 1);
  spec.stride = spec.pool_size;  // non-overlapping windows unless told otherwise
  s.integer("stride", spec.stride, 1);
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

// The one table of layer kinds: YAML name, kind, option keys, parser. A new layer is a new row.
struct KindEntry {
  const char* name;
  LayerKind kind;
  std::vector<std::string> keys;
  void (*parse)(const LayerContext&, const Section&, std::vector<LayerSpec>&);
};
const std::vector<KindEntry>& kind_table() {
  static const std::vector<KindEntry> table = {
      {"conv2d",
       LayerKind::conv2d,
       {"filters", "kernel", "stride", "padding", "bias", "init", "batchnorm", "activation"},
       parse_conv2d},
      {"max_pool", LayerKind::max_pool, {"size", "stride"}, parse_max_pool},
      {"batch_norm", LayerKind::batch_norm, kBatchNormKeys, parse_batch_norm},
      {"relu", LayerKind::relu, {}, parse_relu},
      {"dense",
       LayerKind::dense,
       {"units", "bias", "init", "batchnorm", "activation"},
       parse_dense},
      {"dropout", LayerKind::dropout, {"rate"}, parse_dropout},
      {"flatten", LayerKind::flatten, {}, parse_flatten},
  };
  return table;
}

std::vector<std::string> kind_names() {
  std::vector<std::string> names;
  for (const auto& k : kind_table()) names.push_back(k.name);
  return names;
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
    const KindEntry* entry = nullptr;
    for (const auto& k : kind_table()) {
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

ModelConfig parse_model(const Reporter& r, const Section& top) {
  ModelConfig model;
  if (!top.has("model")) r.fail_at(top.mark(), "model", "the 'model' section is required");
  Section s = top.section("model", {"input", "classes", "init", "batch_norm", "layers"});
  if (s.has("input")) {
    YAML::Node v = s.value("input");
    const char* rule = "must be a list of three integers [channels, height, width], each >= 1";
    if (!v.IsSequence() || v.size() != 3) r.fail_value(v, s.child("input"), rule);
    int* dims[3] = {&model.input_c, &model.input_h, &model.input_w};
    for (size_t i = 0; i < 3; ++i) {
      *dims[i] = static_cast<int>(
          read_integer(r, v[i], fmt::format("{}[{}]", s.child("input"), i), 1, 1 << 20));
    }
  }
  s.integer("classes", model.classes, 2, 255);  // labels are stored as bytes
  ModelDefaults defaults;
  if (s.has("init")) defaults.init = parse_init(r, s.value("init"), s.child("init"), defaults.init);
  parse_batch_norm_options(s.section("batch_norm", kBatchNormKeys), defaults.batch_norm);
  parse_layers(r, s, defaults, model.layers);
  return model;
}

// ---- the other sections -------------------------------------------------------------------------

DataConfig parse_data(const Reporter& r, const Section& top) {
  DataConfig data;
  Section s = top.section("data", {"dataset", "dir", "files", "validation_size", "random_shift"});
  s.choice("dataset", data.dataset, kDatasets);
  s.text("dir", data.dir);
  s.integer("validation_size", data.validation_size, 0);
  s.integer("random_shift", data.random_shift, 0, 8);
  Section files =
      s.section("files", {"train_images", "train_labels", "test_images", "test_labels"});
  files.text("train_images", data.train_images);
  files.text("train_labels", data.train_labels);
  files.text("test_images", data.test_images);
  files.text("test_labels", data.test_labels);
  bool all_files = !data.train_images.empty() && !data.train_labels.empty() &&
                   !data.test_images.empty() && !data.test_labels.empty();
  if (data.dataset == "custom" && data.dir.empty() && !all_files) {
    r.fail_at(s.mark(), s.path(),
              "dataset 'custom' needs 'dir' or all four of files.train_images, "
              "files.train_labels, files.test_images, files.test_labels");
  }
  if (data.dir.empty()) data.dir = "data/" + data.dataset;
  return data;
}

DevicesConfig parse_devices(const Reporter& r, const Section& top) {
  DevicesConfig dev;
  Section s = top.section("devices", {"backend", "gpus", "engine", "cpu_workers", "threads"});
  s.choice("backend", dev.backend, kBackends);
  s.choice("engine", dev.engine, kEngines);
  s.integer("cpu_workers", dev.cpu_workers, 1, 1024);
  s.integer("threads", dev.threads, 0, 4096);
  if (s.has("gpus")) {
    YAML::Node v = s.value("gpus");
    std::string path = s.child("gpus");
    const char* rule =
        "must be 'all', a list of GPU ordinals >= 0 like [0, 1] (repeat one to run several "
        "workers on it), or 'auto:N' with N >= 1 (the N GPUs with most free memory)";
    if (v.IsSequence()) {
      if (v.size() == 0) r.fail_value(v, path, rule);
      dev.gpus_mode = "list";
      for (size_t i = 0; i < v.size(); ++i) {
        dev.gpu_list.push_back(
            static_cast<int>(read_integer(r, v[i], fmt::format("{}[{}]", path, i), 0, 1023)));
      }
    } else if (v.IsScalar() && v.Scalar() == "all") {
      dev.gpus_mode = "all";
    } else if (v.IsScalar() && v.Scalar().rfind("auto:", 0) == 0) {
      std::string n = v.Scalar().substr(5);
      if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos ||
          std::stoi(n) < 1) {
        r.fail_value(v, path, rule);
      }
      dev.gpus_mode = "auto";
      dev.gpus_auto_count = std::stoi(n);
    } else {
      r.fail_value(v, path, rule);
    }
  }
  const bool cuda_only = dev.engine == "cublas" || dev.engine == "cudnn";
  if (dev.backend == BackendChoice::cpu && cuda_only) {
    r.fail(s.value("engine"), s.child("engine"),
           fmt::format("'{}' is not allowed with backend cpu: the cublas and cudnn engines need "
                       "the cuda backend (CPU engines: native, blas)",
                       dev.engine));
  }
  if (dev.backend == BackendChoice::cuda && dev.engine == "blas") {
    r.fail(s.value("engine"), s.child("engine"),
           "'blas' is not allowed with backend cuda: it is a CPU engine (CUDA engines: native, "
           "cublas, cudnn)");
  }
  return dev;
}

TrainConfig parse_train(const Reporter& r, const Section& top) {
  TrainConfig t;
  if (!top.has("train")) {
    r.fail_at(top.mark(), "train",
              "the 'train' section is required (one of steps/epochs and one of "
              "batch_per_device/global_batch)");
  }
  Section s =
      top.section("train", {"steps", "epochs", "batch_per_device", "global_batch", "log_every",
                            "eval_every", "eval_batch", "batch_norm", "scale_lr_with_devices",
                            "watchdog_seconds", "log_after_update"});
  s.exactly_one("steps", "epochs");
  s.exactly_one("batch_per_device", "global_batch");
  s.integer("steps", t.steps, 1);
  s.number("epochs", t.epochs, above(0));
  s.integer("batch_per_device", t.batch_per_device, 1);
  s.integer("global_batch", t.global_batch, 1);
  s.integer("log_every", t.log_every, 1);
  s.integer("eval_every", t.eval_every, 0);
  s.integer("eval_batch", t.eval_batch, 1);
  s.choice("batch_norm", t.batch_norm, kBatchNormModes);
  s.boolean("scale_lr_with_devices", t.scale_lr_with_devices);
  s.number("watchdog_seconds", t.watchdog_seconds, above(0));
  s.boolean("log_after_update", t.log_after_update);
  return t;
}

OptimizerConfig parse_optimizer(const Section& top) {
  OptimizerConfig o;
  Section s =
      top.section("optimizer", {"type", "lr", "beta1", "beta2", "epsilon", "epsilon_style",
                                "momentum", "nesterov", "weight_decay", "weight_decay_mode"});
  s.choice("type", o.kind, kOptimizers);
  if (o.kind == OptimizerKind::adam) {
    s.forbid({"momentum", "nesterov"}, "with type adam (it is an sgd option)");
  } else {
    s.forbid({"beta1", "beta2", "epsilon", "epsilon_style"},
             "with type sgd (it is an adam option)");
  }
  s.number("lr", o.lr, above(0));
  s.number("beta1", o.beta1, half_open(0, 1));
  s.number("beta2", o.beta2, half_open(0, 1));
  s.number("epsilon", o.epsilon, above(0));
  s.choice("epsilon_style", o.epsilon_style, kAdamEpsilons);
  s.number("momentum", o.momentum, half_open(0, 1));
  s.boolean("nesterov", o.nesterov);
  if (o.nesterov && o.momentum == 0) {
    s.reporter().fail(s.value("nesterov"), s.child("nesterov"),
                      "true is not allowed with momentum 0: Nesterov needs momentum > 0");
  }
  s.number("weight_decay", o.weight_decay, at_least(0));
  s.choice("weight_decay_mode", o.weight_decay_mode, kWeightDecayModes);
  return o;
}

ScheduleConfig parse_schedule(const Section& top, const OptimizerConfig& opt) {
  ScheduleConfig sc;
  Section s = top.section("schedule", {"type", "warmup_steps", "step_size", "gamma", "min_lr"});
  s.choice("type", sc.kind, kSchedules);
  const std::string& type = choice_name(kSchedules, sc.kind);
  if (sc.kind != ScheduleKind::step) {
    s.forbid({"step_size", "gamma"}, fmt::format("with type {} (it is a step option)", type));
  }
  if (sc.kind != ScheduleKind::cosine) {
    s.forbid({"min_lr"}, fmt::format("with type {} (it is a cosine option)", type));
  }
  s.integer("warmup_steps", sc.warmup_steps, 0);
  s.integer("step_size", sc.step_size, 1);
  s.number("gamma", sc.gamma, Range{0, true, 1, false});
  s.number("min_lr", sc.min_lr, at_least(0));
  if (sc.min_lr > opt.lr) {
    s.reporter().fail_value(s.value("min_lr"), s.child("min_lr"),
                            fmt::format("must be <= optimizer.lr ({}): cosine decays from lr "
                                        "down to min_lr",
                                        opt.lr));
  }
  return sc;
}

Experiment build_experiment(const Reporter& r, const YAML::Node& root) {
  if (!root.IsMap()) {
    r.fail_value(root, "",
                 "a config file is a map with sections name, data, model, devices, "
                 "train, optimizer, ...");
  }
  Section top(r, root, "",
              {"name", "seed", "data", "model", "devices", "train", "optimizer", "schedule",
               "output", "checkpoint"});
  Experiment e;
  top.text("name", e.name);
  if (e.name.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
      std::string::npos) {
    r.fail_value(top.value("name"), "name",
                 "must use only letters, digits, '.', '_' and '-' (it names the run directory)");
  }
  top.integer("seed", e.seed, 0);
  e.data = parse_data(r, top);
  e.model = parse_model(r, top);
  e.devices = parse_devices(r, top);
  e.train = parse_train(r, top);
  e.optimizer = parse_optimizer(top);
  e.schedule = parse_schedule(top, e.optimizer);
  Section out = top.section("output", {"dir", "log_format", "tensorboard"});
  out.text("dir", e.output.dir);
  out.choice("log_format", e.output.log_format, kLogFormats);
  out.boolean("tensorboard", e.output.tensorboard);
  if (e.output.dir.empty()) e.output.dir = "runs/" + e.name;
  Section ck = top.section("checkpoint", {"every", "keep"});
  ck.integer("every", e.checkpoint.every, 0);
  ck.integer("keep", e.checkpoint.keep, 1);
  return e;
}

// ---- overrides ----------------------------------------------------------------------------------

struct PathToken {
  std::string key;  // empty for an index
  size_t index = 0;
};

// "model.layers[2].dense.units" -> model, layers, [2], dense, units.
std::vector<PathToken> parse_override_path(const std::string& path, const std::string& where) {
  std::vector<PathToken> tokens;
  size_t i = 0;
  auto bad = [&](const std::string& why) {
    MNIST_THROW(ConfigError,
                "{}: '{}' is not a valid key path ({}); write e.g. train.steps=50 or "
                "model.layers[2].dense.units=50",
                where, path, why);
  };
  while (i < path.size()) {
    if (path[i] == '[') {
      size_t close = path.find(']', i);
      std::string digits = close == std::string::npos ? "" : path.substr(i + 1, close - i - 1);
      if (tokens.empty() || digits.empty() || digits.size() > 6 ||
          digits.find_first_not_of("0123456789") != std::string::npos) {
        bad(fmt::format("bad list index at character {}", i + 1));
      }
      tokens.push_back({"", std::stoul(digits)});
      i = close + 1;
    } else {
      if (!tokens.empty()) {
        if (path[i] != '.') bad(fmt::format("expected '.' or '[' at character {}", i + 1));
        ++i;
      }
      size_t end = path.find_first_of(".[", i);
      if (end == std::string::npos) end = path.size();
      if (end == i) bad(fmt::format("empty key at character {}", i + 1));
      tokens.push_back({path.substr(i, end - i), 0});
      i = end;
    }
  }
  if (tokens.empty()) bad("it is empty");
  return tokens;
}

bool map_has_key(const YAML::Node& map, const std::string& key) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return true;
  }
  return false;
}

// Keys of which a config gives exactly one: an override of one replaces the other, so
// `--set train.global_batch=300` works on a config that has train.batch_per_device.
constexpr std::pair<const char*, const char*> kExclusiveKeys[] = {
    {"train.steps", "train.epochs"},
    {"train.batch_per_device", "train.global_batch"},
};

// The other key of an exclusive pair, or "" when `path` is in none.
std::string exclusive_partner(const std::string& path) {
  for (const auto& [a, b] : kExclusiveKeys) {
    if (path == a) return b;
    if (path == b) return a;
  }
  return "";
}

// Removes "section.key" from the tree if it is there (only top-level sections hold such keys).
void erase_key(YAML::Node& root, const std::string& path) {
  const std::size_t dot = path.find('.');
  YAML::Node section = root[path.substr(0, dot)];
  if (section.IsMap()) section.remove(path.substr(dot + 1));
}

// Writes one "key.path=value" into the tree. Keys that do not exist are created (the schema check
// that follows then rejects unknown ones with a hint); list indices must exist.
void apply_override(YAML::Node& root, const std::string& text, Reporter& r,
                    const std::string& source) {
  std::string where = fmt::format("{}: --set '{}'", source, text);
  size_t eq = text.find('=');
  if (eq == std::string::npos) {
    MNIST_THROW(ConfigError, "{}: an override is key.path=value, e.g. train.steps=50", where);
  }
  std::string key_path = text.substr(0, eq);
  std::vector<PathToken> tokens = parse_override_path(key_path, where);
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& ex) {
    MNIST_THROW(ConfigError, "{}: the value is not valid YAML: {}", where, ex.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);

  std::string path, origin;
  YAML::Node cur = root;
  bool parent_is_list = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const PathToken& t = tokens[i];
    bool last = i + 1 == tokens.size();
    if (t.key.empty()) {
      if (!cur.IsSequence()) {
        MNIST_THROW(ConfigError, "{}: {} is {}, not a list; it has no item [{}]", where, path,
                    show(cur), t.index);
      }
      if (t.index >= cur.size()) {
        MNIST_THROW(ConfigError, "{}: {} has {} items (indices 0..{}); [{}] is out of range", where,
                    path, cur.size(), cur.size() - 1, t.index);
      }
      path += fmt::format("[{}]", t.index);
      if (last) {
        cur[t.index] = value;
      } else {
        YAML::Node next = cur[t.index];
        cur.reset(next);
      }
      parent_is_list = true;
    } else {
      std::string child = path.empty() ? t.key : path + "." + t.key;
      if (cur.IsDefined() && !cur.IsNull() && !cur.IsMap()) {
        MNIST_THROW(ConfigError, "{}: {} is {}, not a map; it has no key '{}'", where, path,
                    show(cur), t.key);
      }
      bool exists = cur.IsMap() && map_has_key(cur, t.key);
      if (!exists && parent_is_list && cur.IsMap() && cur.size() == 1) {
        // A layer item: its single key is its kind, and naming another kind would add a second.
        MNIST_THROW(ConfigError, "{}: {} is a '{}' layer, not '{}'", where, path,
                    cur.begin()->first.Scalar(), t.key);
      }
      if (!exists && origin.empty()) origin = child;
      path = child;
      if (last) {
        cur[t.key] = value;
      } else {
        YAML::Node next = cur[t.key];
        cur.reset(next);
      }
      parent_is_list = false;
    }
  }
  r.overrides.push_back({text, origin.empty() ? path : origin});
  const std::string partner = exclusive_partner(path);
  if (!partner.empty()) erase_key(root, partner);
}

// Removes one key (a map entry) from the tree: --unset train.epochs. The key must be there.
void apply_unset(YAML::Node& root, const std::string& key_path, const std::string& source) {
  const std::string where = fmt::format("{}: --unset '{}'", source, key_path);
  std::vector<PathToken> tokens = parse_override_path(key_path, where);
  if (tokens.back().key.empty())
    MNIST_THROW(ConfigError, "{}: only a key can be unset, not a list item", where);
  YAML::Node cur = root;
  std::string path;
  for (std::size_t i = 0; i + 1 < tokens.size(); ++i) {
    const PathToken& t = tokens[i];
    YAML::Node next;
    if (t.key.empty()) {
      if (!cur.IsSequence() || t.index >= cur.size())
        MNIST_THROW(ConfigError, "{}: {} has no item [{}]", where, path, t.index);
      next = cur[t.index];
      path += fmt::format("[{}]", t.index);
    } else {
      if (!cur.IsMap() || !map_has_key(cur, t.key))
        MNIST_THROW(ConfigError, "{}: the config has no '{}'", where,
                    path.empty() ? t.key : path + "." + t.key);
      next = cur[t.key];
      path = path.empty() ? t.key : path + "." + t.key;
    }
    cur.reset(next);
  }
  if (!cur.IsMap() || !map_has_key(cur, tokens.back().key))
    MNIST_THROW(ConfigError, "{}: the config has no key '{}'{}", where, key_path,
                " (nothing to unset)");
  cur.remove(tokens.back().key);
}

// ---- emitting -----------------------------------------------------------------------------------

// Shortest text that reads back as the same value ({} is fmt's round-trip format).
template <class T>
std::string num(T v) {
  return fmt::format("{}", v);
}
const char* boolean(bool b) {
  return b ? "true" : "false";
}

void emit_init(YAML::Emitter& y, const InitSpec& init) {
  y << YAML::Key << "init" << YAML::Value << YAML::Flow << YAML::BeginMap;
  y << YAML::Key << "type" << YAML::Value << choice_name(kInits, init.kind);
  if (init.kind == InitKind::truncated_normal) {
    y << YAML::Key << "mean" << YAML::Value << num(init.mean);
    y << YAML::Key << "stddev" << YAML::Value << num(init.stddev);
  }
  y << YAML::EndMap;
}

void emit_layer(YAML::Emitter& y, const LayerSpec& l) {
  y << YAML::BeginMap << YAML::Key << to_string(l.kind) << YAML::Value << YAML::Flow
    << YAML::BeginMap;
  switch (l.kind) {
    case LayerKind::conv2d:
      y << YAML::Key << "filters" << YAML::Value << l.filters;
      y << YAML::Key << "kernel" << YAML::Value << l.kernel;
      y << YAML::Key << "stride" << YAML::Value << l.stride;
      y << YAML::Key << "padding" << YAML::Value;
      if (l.padding == PaddingMode::explicit_pixels) {
        y << l.padding_pixels;
      } else {
        y << (l.padding == PaddingMode::same ? "same" : "valid");
      }
      y << YAML::Key << "bias" << YAML::Value << boolean(l.bias);
      emit_init(y, l.init);
      break;
    case LayerKind::dense:
      y << YAML::Key << "units" << YAML::Value << l.units;
      y << YAML::Key << "bias" << YAML::Value << boolean(l.bias);
      emit_init(y, l.init);
      break;
    case LayerKind::max_pool:
      y << YAML::Key << "size" << YAML::Value << l.pool_size;
      y << YAML::Key << "stride" << YAML::Value << l.stride;
      break;
    case LayerKind::batch_norm:
      y << YAML::Key << "decay" << YAML::Value << num(l.decay);
      y << YAML::Key << "epsilon" << YAML::Value << num(l.epsilon);
      y << YAML::Key << "center" << YAML::Value << boolean(l.center);
      y << YAML::Key << "scale" << YAML::Value << boolean(l.scale);
      break;
    case LayerKind::dropout:
      y << YAML::Key << "rate" << YAML::Value << num(l.rate);
      break;
    case LayerKind::relu:
    case LayerKind::flatten:
      break;
  }
  y << YAML::EndMap << YAML::EndMap;
}

}  // namespace

const char* to_string(LayerKind k) {
  for (const auto& entry : kind_table()) {
    if (entry.kind == k) return entry.name;
  }
  return "unknown";
}

Experiment parse_experiment(const std::string& yaml_text, const std::string& source_name,
                            const std::vector<std::string>& overrides,
                            const std::vector<std::string>& unsets) {
  Reporter r(source_name);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& ex) {
    MNIST_THROW(ConfigError, "{}:{}:{}: not valid YAML: {}", source_name, ex.mark.line + 1,
                ex.mark.column + 1, ex.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  for (const auto& key : unsets) apply_unset(root, key, source_name);
  for (const auto& o : overrides) apply_override(root, o, r, source_name);
  Experiment e = build_experiment(r, root);
  e.source_path = source_name;
  return e;
}

Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides,
                           const std::vector<std::string>& unsets) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    MNIST_THROW(ConfigError, "{}: cannot open the config file: {}", path, std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_experiment(text.str(), path, overrides, unsets);
}

std::string to_yaml(const Experiment& e) {
  YAML::Emitter y;
  y << YAML::BeginMap;
  y << YAML::Key << "name" << YAML::Value << e.name;
  y << YAML::Key << "seed" << YAML::Value << e.seed;

  y << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "dataset" << YAML::Value << e.data.dataset;
  y << YAML::Key << "dir" << YAML::Value << e.data.dir;
  const std::pair<const char*, const std::string*> files[] = {
      {"train_images", &e.data.train_images},
      {"train_labels", &e.data.train_labels},
      {"test_images", &e.data.test_images},
      {"test_labels", &e.data.test_labels}};
  bool any_file = false;
  for (const auto& f : files) any_file = any_file || !f.second->empty();
  if (any_file) {  // unset paths are derived from dir, so only set ones are written
    y << YAML::Key << "files" << YAML::Value << YAML::BeginMap;
    for (const auto& f : files) {
      if (!f.second->empty()) y << YAML::Key << f.first << YAML::Value << *f.second;
    }
    y << YAML::EndMap;
  }
  y << YAML::Key << "validation_size" << YAML::Value << e.data.validation_size;
  y << YAML::Key << "random_shift" << YAML::Value << e.data.random_shift;
  y << YAML::EndMap;

  // Layers are written expanded (batch_norm / relu as their own items, every option explicit), so
  // the file reads back to the same list whatever model-wide defaults the original used.
  y << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "input" << YAML::Value << YAML::Flow << YAML::BeginSeq << e.model.input_c
    << e.model.input_h << e.model.input_w << YAML::EndSeq;
  y << YAML::Key << "classes" << YAML::Value << e.model.classes;
  y << YAML::Key << "layers" << YAML::Value << YAML::BeginSeq;
  for (const auto& l : e.model.layers) emit_layer(y, l);
  y << YAML::EndSeq << YAML::EndMap;

  const DevicesConfig& d = e.devices;
  y << YAML::Key << "devices" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "backend" << YAML::Value << choice_name(kBackends, d.backend);
  y << YAML::Key << "gpus" << YAML::Value;
  if (d.gpus_mode == "list") {
    y << YAML::Flow << YAML::BeginSeq;
    for (int g : d.gpu_list) y << g;
    y << YAML::EndSeq;
  } else if (d.gpus_mode == "auto") {
    y << fmt::format("auto:{}", d.gpus_auto_count);
  } else {
    y << "all";
  }
  y << YAML::Key << "engine" << YAML::Value << d.engine;
  y << YAML::Key << "cpu_workers" << YAML::Value << d.cpu_workers;
  y << YAML::Key << "threads" << YAML::Value << d.threads;
  y << YAML::EndMap;

  const TrainConfig& t = e.train;
  y << YAML::Key << "train" << YAML::Value << YAML::BeginMap;
  if (t.steps > 0) {
    y << YAML::Key << "steps" << YAML::Value << t.steps;
  } else {
    y << YAML::Key << "epochs" << YAML::Value << num(t.epochs);
  }
  if (t.batch_per_device > 0) {
    y << YAML::Key << "batch_per_device" << YAML::Value << t.batch_per_device;
  } else {
    y << YAML::Key << "global_batch" << YAML::Value << t.global_batch;
  }
  y << YAML::Key << "log_every" << YAML::Value << t.log_every;
  y << YAML::Key << "eval_every" << YAML::Value << t.eval_every;
  y << YAML::Key << "eval_batch" << YAML::Value << t.eval_batch;
  y << YAML::Key << "batch_norm" << YAML::Value << choice_name(kBatchNormModes, t.batch_norm);
  y << YAML::Key << "scale_lr_with_devices" << YAML::Value << boolean(t.scale_lr_with_devices);
  y << YAML::Key << "watchdog_seconds" << YAML::Value << num(t.watchdog_seconds);
  y << YAML::Key << "log_after_update" << YAML::Value << boolean(t.log_after_update);
  y << YAML::EndMap;

  const OptimizerConfig& o = e.optimizer;
  y << YAML::Key << "optimizer" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "type" << YAML::Value << choice_name(kOptimizers, o.kind);
  y << YAML::Key << "lr" << YAML::Value << num(o.lr);
  if (o.kind == OptimizerKind::adam) {
    y << YAML::Key << "beta1" << YAML::Value << num(o.beta1);
    y << YAML::Key << "beta2" << YAML::Value << num(o.beta2);
    y << YAML::Key << "epsilon" << YAML::Value << num(o.epsilon);
    y << YAML::Key << "epsilon_style" << YAML::Value << choice_name(kAdamEpsilons, o.epsilon_style);
  } else {
    y << YAML::Key << "momentum" << YAML::Value << num(o.momentum);
    y << YAML::Key << "nesterov" << YAML::Value << boolean(o.nesterov);
  }
  y << YAML::Key << "weight_decay" << YAML::Value << num(o.weight_decay);
  y << YAML::Key << "weight_decay_mode" << YAML::Value
    << choice_name(kWeightDecayModes, o.weight_decay_mode);
  y << YAML::EndMap;

  const ScheduleConfig& s = e.schedule;
  y << YAML::Key << "schedule" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "type" << YAML::Value << choice_name(kSchedules, s.kind);
  y << YAML::Key << "warmup_steps" << YAML::Value << s.warmup_steps;
  if (s.kind == ScheduleKind::step) {
    y << YAML::Key << "step_size" << YAML::Value << s.step_size;
    y << YAML::Key << "gamma" << YAML::Value << num(s.gamma);
  }
  if (s.kind == ScheduleKind::cosine) y << YAML::Key << "min_lr" << YAML::Value << num(s.min_lr);
  y << YAML::EndMap;

  y << YAML::Key << "output" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "dir" << YAML::Value << e.output.dir;
  y << YAML::Key << "log_format" << YAML::Value << choice_name(kLogFormats, e.output.log_format);
  y << YAML::Key << "tensorboard" << YAML::Value << e.output.tensorboard;
  y << YAML::EndMap;

  y << YAML::Key << "checkpoint" << YAML::Value << YAML::BeginMap;
  y << YAML::Key << "every" << YAML::Value << e.checkpoint.every;
  y << YAML::Key << "keep" << YAML::Value << e.checkpoint.keep;
  y << YAML::EndMap;

  y << YAML::EndMap;
  MNIST_CHECK(y.good(), "emitting the resolved config failed: {}", y.GetLastError());
  return std::string(y.c_str()) + "\n";
}

}  // namespace mnist
