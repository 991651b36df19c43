// Recursive-descent JSON reader. Input is small (a checkpoint header is a few kilobytes), so
// clarity wins over speed: one function per grammar rule, each reporting where it stopped.

#include "core/json.hpp"

#include <cctype>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace mnist::json {
namespace {

// What a byte looks like in a message: printable characters quoted, others in hex.
std::string describe(std::string_view text, std::size_t pos) {
  if (pos >= text.size()) return "the end of the text";
  const auto c = static_cast<unsigned char>(text[pos]);
  if (c >= 0x20 && c < 0x7f) return fmt::format("'{}'", static_cast<char>(c));
  return fmt::format("byte 0x{:02x}", c);
}

class Parser {
 public:
  Parser(std::string_view text, const std::string& source, std::size_t base)
      : text_(text), source_(source), base_(base) {}

  Value document() {
    skip_space();
    Value v = value(0);
    skip_space();
    if (pos_ != text_.size()) fail("nothing after the top-level value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& expected) const { fail_at(pos_, expected); }
  [[noreturn]] void fail_at(std::size_t pos, const std::string& expected) const {
    MNIST_THROW(DataError, "{}: invalid JSON at byte offset {}: expected {}, found {}", source_,
                base_ + pos, expected, describe(text_, pos));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r'))
      ++pos_;
  }

  void expect_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail(fmt::format("'{}'", word));
    pos_ += word.size();
  }

  Value value(int depth) {
    if (depth >= kMaxDepth) fail(fmt::format("at most {} levels of nesting", kMaxDepth));
    Value v;
    v.offset = base_ + pos_;
    switch (peek()) {
      case '{':
        object(v, depth);
        break;
      case '[':
        array(v, depth);
        break;
      case '"':
        v.type = Type::string;
        v.text = string();
        break;
      case 't':
        expect_word("true");
        v.type = Type::boolean;
        v.boolean = true;
        break;
      case 'f':
        expect_word("false");
        v.type = Type::boolean;
        break;
      case 'n':
        expect_word("null");
        break;
      default:
        if (peek() == '-' || std::isdigit(static_cast<unsigned char>(peek()))) {
          v.type = Type::number;
          v.text = number();
        } else {
          fail("a value (object, array, string, number, true, false or null)");
        }
    }
    return v;
  }

  void object(Value& v, int depth) {
    v.type = Type::object;
    ++pos_;  // '{'
    skip_space();
    if (peek() == '}') {
      ++pos_;
      return;
    }
    while (true) {
      skip_space();
      if (peek() != '"') fail("a string key");
      const std::size_t key_pos = pos_;
      std::string key = string();
      if (v.find(key) != nullptr)
        fail_at(key_pos, fmt::format("a key other than {}, which is already used in this object",
                                     quote(key)));
      skip_space();
      if (peek() != ':') fail("':' after the key");
      ++pos_;
      skip_space();
      Value member = value(depth + 1);
      v.members.emplace_back(std::move(key), std::move(member));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return;
      }
      fail("',' or '}' in the object");
    }
  }

  void array(Value& v, int depth) {
    v.type = Type::array;
    ++pos_;  // '['
    skip_space();
    if (peek() == ']') {
      ++pos_;
      return;
    }
    while (true) {
      skip_space();
      v.items.push_back(value(depth + 1));
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return;
      }
      fail("',' or ']' in the array");
    }
  }

  // JSON's grammar exactly: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  std::string number() {
    const std::size_t start = pos_;
    auto digits = [&](const char* what) {
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail(what);
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') {
      ++pos_;
      if (std::isdigit(static_cast<unsigned char>(peek())))
        fail("no digits after a leading 0 (JSON has no leading zeros)");
    } else {
      digits("a digit");
    }
    if (peek() == '.') {
      ++pos_;
      digits("a digit after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits("a digit in the exponent");
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  unsigned hex4() {
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      unsigned d;
      if (c >= '0' && c <= '9')
        d = c - '0';
      else if (c >= 'a' && c <= 'f')
        d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        d = c - 'A' + 10;
      else
        fail("a hexadecimal digit in a \\u escape");
      code = code * 16 + d;
      ++pos_;
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xc0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xe0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    }
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (at_end()) fail("'\"' to close the string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20)
        fail("a character other than a raw control character (write it as an escape)");
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned code = hex4();
          // A UTF-16 surrogate pair spells one code point beyond the basic plane.
          if (code >= 0xd800 && code < 0xdc00) {
            if (text_.substr(pos_, 2) != "\\u")
              fail("a low surrogate \\uDC00-\\uDFFF after a high surrogate");
            pos_ += 2;
            const unsigned low = hex4();
            if (low < 0xdc00 || low >= 0xe000) fail_at(pos_ - 4, "a low surrogate \\uDC00-\\uDFFF");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          } else if (code >= 0xdc00 && code < 0xe000) {
            fail_at(pos_ - 4, "a code point that is not a lone low surrogate");
          }
          append_utf8(out, code);
          break;
        }
        default:
          fail_at(pos_ - 1, "an escape (one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u)");
      }
    }
  }

  std::string_view text_;
  const std::string& source_;
  std::size_t base_;
  std::size_t pos_ = 0;
};

}  // namespace

const char* to_string(Type t) {
  switch (t) {
    case Type::null:
      return "null";
    case Type::boolean:
      return "a boolean";
    case Type::number:
      return "a number";
    case Type::string:
      return "a string";
    case Type::array:
      return "an array";
    case Type::object:
      return "an object";
  }
  return "?";
}

const Value* Value::find(std::string_view key) const {
  for (const auto& m : members)
    if (m.first == key) return &m.second;
  return nullptr;
}

bool Value::as_uint64(uint64_t& out) const {
  if (type != Type::number || text.empty()) return false;
  uint64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  out = v;
  return true;
}

Value parse(std::string_view text, const std::string& source, std::size_t offset_base) {
  return Parser(text, source, offset_base).document();
}

std::string quote(std::string_view s) {
  // nlohmann's writer: escapes what JSON requires and writes bytes that are not UTF-8 as U+FFFD,
  // so a path or a provenance line in another encoding still makes valid JSON.
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace mnist::json
