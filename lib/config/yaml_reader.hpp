#pragma once
// Generic reading of a YAML config tree, with the error reporting every reader shares.
//
// Nothing here knows the experiment's sections: it is the toolkit they are written with. A
// Reporter turns a problem into a ConfigError naming the file, line:column (or the --set text the
// value came from), the YAML path, the value found and the rule it breaks; a Section is one YAML
// map read against its list of known keys; the read_* functions check one scalar's type and range.
// Internal to lib/config (it exposes yaml-cpp types, which the rest of the project never sees).

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/spellings.hpp"

namespace mnist::config_detail {

// ---- where a value came from -------------------------------------------------------------------

// An override owns the subtree it wrote or created: errors under `path` point at the --set text,
// because line numbers inside the override's own YAML value would mean nothing in the file.
struct OverrideOrigin {
  std::string text;  // the whole "key.path=value" as given
  std::string path;  // YAML path of the first node the override replaced or created
};

std::string join(const std::vector<std::string>& items, const char* sep = ", ");

// " did you mean 'x'?" when one known word is close enough to be the intended one, else "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& known);

// A value as the user wrote it, for messages: 6, 'relu', a map, a list, an empty value.
std::string show(const YAML::Node& node);

class Reporter {
 public:
  explicit Reporter(std::string source) : source_(std::move(source)) {}
  std::vector<OverrideOrigin> overrides;

  const std::string& source() const { return source_; }
  // "file:line:col" or "file: --set 'text'" for the value at `path`.
  std::string location(const std::string& path, const YAML::Mark& mark) const;
  // Where the value at `path` came from, for messages that name two keys: "from --set '...'" or
  // "at line N" (never "line 0" for a value that no line holds).
  std::string origin(const std::string& path, const YAML::Mark& mark) const;

  [[noreturn]] void fail_at(const YAML::Mark& mark, const std::string& path,
                            const std::string& message) const;
  [[noreturn]] void fail(const YAML::Node& node, const std::string& path,
                         const std::string& message) const;
  // "<path>: <value> is not allowed: <rule>"
  [[noreturn]] void fail_value(const YAML::Node& node, const std::string& path,
                               const std::string& rule) const;

 private:
  std::string source_;
};

// ---- scalar readers: each checks type and range and names the rule ------------------------------

// Quoted scalars carry the tag "!": `filters: "6"` is a string, not a number.
bool is_plain_scalar(const YAML::Node& node);

// `hi_is_rule`: whether `hi` belongs in the message; a cap that only reflects the field's C++ type
// is named only when a value actually exceeds it.
int64_t read_integer(const Reporter& r, const YAML::Node& node, const std::string& path, int64_t lo,
                     int64_t hi, bool hi_is_rule = true);

struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  bool lo_open = false;
  double hi = std::numeric_limits<double>::infinity();
  bool hi_open = false;
};
Range at_least(double lo);            // [lo, inf)
Range above(double lo);               // (lo, inf)
Range half_open(double lo, double hi);  // [lo, hi)

double read_number(const Reporter& r, const YAML::Node& node, const std::string& path,
                   const Range& range);
bool read_bool(const Reporter& r, const YAML::Node& node, const std::string& path);
std::string read_string(const Reporter& r, const YAML::Node& node, const std::string& path);

// One of a table's spellings (spellings.hpp rows, or any rows with `name` and `value`):
// "must be one of: a, b, c; did you mean 'b'?" otherwise.
template <class Rows>
auto read_choice(const Reporter& r, const YAML::Node& node, const std::string& path,
                 const Rows& rows) -> decltype(rows.begin()->value) {
  std::vector<std::string> names;
  for (const auto& row : rows) names.push_back(row.name);
  if (node.IsScalar()) {
    for (const auto& row : rows) {
      if (node.Scalar() == row.name) return row.value;
    }
  }
  std::string hint = node.IsScalar() ? did_you_mean(node.Scalar(), names) : "";
  r.fail_value(node, path, "must be one of: " + join(names) + ";" + hint);
}

// ---- maps: known keys, duplicates, typed lookups -----------------------------------------------

// A YAML map being read as one config section. Construction rejects a non-map, duplicated keys and
// unknown keys, so the typed getters below only ever see keys the schema knows.
class Section {
 public:
  // `key_mark`: where the section's key is, for messages about an empty or absent section.
  Section(const Reporter& r, const YAML::Node& node, std::string path,
          std::vector<std::string> known, YAML::Mark key_mark = YAML::Mark::null_mark());

  const Reporter& reporter() const { return r_; }
  const std::string& path() const { return path_; }
  const YAML::Node& node() const { return node_; }
  YAML::Mark mark() const;
  std::string child(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  bool has(const std::string& key) const { return find(key) != nullptr; }
  YAML::Node value(const std::string& key) const;
  int key_line(const std::string& key) const;
  YAML::Mark key_mark(const std::string& key) const;
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
  // An enum read through its spelling table.
  template <class E>
  void choice(const std::string& key, E& out) const {
    if (has(key)) out = read_choice(r_, value(key), child(key), spellings(E{}));
  }
  // A string restricted to the words of `rows` (rows with `name` and `value`).
  template <class Rows>
  void choice_among(const std::string& key, std::string& out, const Rows& rows) const {
    if (has(key)) out = read_choice(r_, value(key), child(key), rows);
  }
  // Keys that belong to another variant (momentum under adam): rejected, naming the variant.
  void forbid(const std::vector<std::string>& keys, const std::string& why) const;
  // Exactly one of a and b, naming both when the rule is broken.
  void exactly_one(const std::string& a, const std::string& b) const;

 private:
  struct Entry {
    std::string name;
    YAML::Node key, value;
  };
  const Entry* find(const std::string& key) const;

  const Reporter& r_;
  YAML::Node node_;
  std::string path_;
  std::vector<std::string> known_;
  YAML::Mark key_mark_;
  std::vector<Entry> entries_;
};

}  // namespace mnist::config_detail
