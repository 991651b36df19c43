#pragma once
// A small, strict JSON reader (RFC 8259) and a string quoter, enough for safetensors headers and
// the records the tool writes.
//
// Why a reader of our own beside nlohmann/json, which writes our strings (quote): a checkpoint
// header is untrusted input, and a reader that refuses duplicate keys (nlohmann keeps the last,
// silently), keeps every number's literal as written (exact 64-bit offsets) and names the byte
// offset of every error in the file's terms is the whole of what it takes, in one small file.
//
// Strict means: one value and nothing but whitespace after it, no comments, no trailing commas, no
// duplicate object keys, no control characters inside strings, nesting at most kMaxDepth deep.
// Every error is a DataError naming the source, the byte offset and what was expected there.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mnist::json {

enum class Type { null, boolean, number, string, array, object };
const char* to_string(Type t);

struct Value {
  Type type = Type::null;
  std::size_t offset = 0;  // byte offset of the value's first character in the parsed text
  bool boolean = false;
  std::string text;          // string: the decoded contents (UTF-8); number: the literal as written
  std::vector<Value> items;  // array
  std::vector<std::pair<std::string, Value>> members;  // object, in the order written

  // Object member by key, or nullptr (also when this is not an object).
  const Value* find(std::string_view key) const;
  // True and `out` set when this is a number written as a plain non-negative integer (no sign,
  // fraction or exponent) that fits in 64 bits; exact, unlike a round trip through double.
  bool as_uint64(uint64_t& out) const;
};

inline constexpr int kMaxDepth = 64;

// Parses `text`; `source` names it in messages ("'run/step-000010.safetensors' header").
// `offset_base` is added to every offset reported (e.g. 8 when the text starts at file byte 8).
Value parse(std::string_view text, const std::string& source, std::size_t offset_base = 0);

// `s` as a JSON string literal, quotes included (nlohmann/json's writer): '"', '\\' and control
// characters escaped, UTF-8 kept as it is, and every byte that is not part of valid UTF-8 written
// as U+FFFD (so the output is always valid JSON).
std::string quote(std::string_view s);

}  // namespace mnist::json
