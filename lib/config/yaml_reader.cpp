// Generic reading of a YAML config tree and its error reporting (yaml_reader.hpp says what each
// part is for). Kept apart from the experiment's sections so that they read as a schema, and so
// that every message is worded in one place: file, line:column or --set text, YAML path, value,
// rule.

#include "config/yaml_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "core/error.hpp"
#include "core/printable.hpp"

namespace mnist::config_detail {
namespace {

bool path_within(const std::string& path, const std::string& prefix) {
  if (path.compare(0, prefix.size(), prefix) != 0) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '.' || path[prefix.size()] == '[';
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

}  // namespace

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

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

namespace {

// Other tools' names for our keys, which no edit distance finds ("learning_rate" is 11 edits from
// "lr"); offered only where the section knows the key suggested.
struct KeySynonym {
  const char* theirs;
  const char* ours;
};
constexpr KeySynonym kKeySynonyms[] = {
    {"learning_rate", "lr"},
    {"lr_rate", "lr"},
    {"batch_size", "batch_per_device"},
    {"max_steps", "steps"},
    {"num_steps", "steps"},
    {"num_epochs", "epochs"},
    {"epoch", "epochs"},
    {"num_workers", "cpu_workers"},
    {"num_threads", "threads"},
    {"output_dir", "dir"},
};

// " did you mean 'x'?" for a misspelt key or another tool's name for one, else "".
std::string hint_for_key(const std::string& name, const std::vector<std::string>& known) {
  std::string hint = did_you_mean(name, known);
  if (!hint.empty()) return hint;
  for (const KeySynonym& s : kKeySynonyms)
    if (name == s.theirs && std::find(known.begin(), known.end(), s.ours) != known.end())
      return fmt::format(" did you mean '{}'?", s.ours);
  return "";
}

}  // namespace

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

// ---- Reporter ---------------------------------------------------------------------------------

std::string Reporter::location(const std::string& path, const YAML::Mark& mark) const {
  // The last override wins in the tree, so it is the one to blame.
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
    if (path_within(path, it->path)) return fmt::format("{}: --set '{}'", source_, it->text);
  }
  if (mark.is_null()) return source_;
  return fmt::format("{}:{}:{}", source_, mark.line + 1, mark.column + 1);
}

std::string Reporter::origin(const std::string& path, const YAML::Mark& mark) const {
  for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
    if (path_within(path, it->path)) return fmt::format("from --set '{}'", it->text);
  }
  return mark.is_null() ? std::string("in the file") : fmt::format("at line {}", mark.line + 1);
}

void Reporter::fail_at(const YAML::Mark& mark, const std::string& path,
                       const std::string& message) const {
  MNIST_THROW(ConfigError, "{}: {}: {}", location(path, mark), path.empty() ? "(top level)" : path,
              message);
}

void Reporter::fail(const YAML::Node& node, const std::string& path,
                    const std::string& message) const {
  fail_at(node.IsDefined() ? node.Mark() : YAML::Mark::null_mark(), path, message);
}

void Reporter::fail_value(const YAML::Node& node, const std::string& path,
                          const std::string& rule) const {
  fail(node, path, fmt::format("{} is not allowed: {}", show(node), rule));
}

// ---- scalar readers -----------------------------------------------------------------------------

bool is_plain_scalar(const YAML::Node& node) {
  return node.IsScalar() && node.Tag() == "?";
}

int64_t read_integer(const Reporter& r, const YAML::Node& node, const std::string& path, int64_t lo,
                     int64_t hi, bool hi_is_rule) {
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

// ---- Section ------------------------------------------------------------------------------------

Section::Section(const Reporter& r, const YAML::Node& node, std::string path,
                 std::vector<std::string> known, YAML::Mark key_mark)
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
                             hint_for_key(name, known_), join(known_)));
    }
    entries_.push_back({name, key, it->second});
  }
}

YAML::Mark Section::mark() const {
  // A null value's mark is wherever the parser stood next (often the following line).
  return node_.IsDefined() && !node_.IsNull() ? node_.Mark() : key_mark_;
}

YAML::Node Section::value(const std::string& key) const {
  const Entry* e = find(key);
  return e ? e->value : YAML::Node(YAML::NodeType::Undefined);
}

int Section::key_line(const std::string& key) const {
  const Entry* e = find(key);
  return e ? e->key.Mark().line + 1 : 0;
}

YAML::Mark Section::key_mark(const std::string& key) const {
  const Entry* e = find(key);
  return e ? e->key.Mark() : mark();
}

void Section::forbid(const std::vector<std::string>& keys, const std::string& why) const {
  for (const auto& k : keys) {
    if (has(k)) r_.fail_at(key_mark(k), child(k), fmt::format("'{}' is not allowed {}", k, why));
  }
}

void Section::exactly_one(const std::string& a, const std::string& b) const {
  if (has(a) && has(b)) {
    YAML::Mark ma = key_mark(a), mb = key_mark(b);
    bool b_later = mb.line > ma.line || (mb.line == ma.line && mb.column > ma.column);
    const std::string& later = b_later ? b : a;
    r_.fail_at(key_mark(later), path_,
               fmt::format("give exactly one of '{}' and '{}'; found both ({} {}, {} {})", a, b, a,
                           r_.origin(child(a), key_mark(a)), b, r_.origin(child(b), key_mark(b))));
  }
  if (!has(a) && !has(b)) {
    r_.fail_at(mark(), path_,
               fmt::format("give exactly one of '{}' and '{}'; found neither", a, b));
  }
}

const Section::Entry* Section::find(const std::string& key) const {
  for (const auto& e : entries_) {
    if (e.name == key) return &e;
  }
  return nullptr;
}

}  // namespace mnist::config_detail
