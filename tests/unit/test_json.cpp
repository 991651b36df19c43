// The strict JSON reader behind checkpoint headers: values, escapes, and errors with byte offsets.

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "core/json.hpp"

using namespace mnist;
using Catch::Matchers::Contains;

TEST_CASE("the JSON reader is strict and reports byte offsets", "[json]") {
  const json::Value v = json::parse(
      R"( {"a": [1, 18446744073709551615, -2, 1.5e3], "s": "x\"\\\n\u00e9\ud83d\ude00", "t": true, "n": null} )",
      "test");
  REQUIRE(v.type == json::Type::object);
  uint64_t u = 0;
  CHECK(v.find("a")->items[1].as_uint64(u));
  CHECK(u == 18446744073709551615ull);
  CHECK_FALSE(v.find("a")->items[2].as_uint64(u));
  CHECK_FALSE(v.find("a")->items[3].as_uint64(u));
  CHECK(v.find("s")->text == "x\"\\\n\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(v.find("a")->offset == 7);
  CHECK(json::parse(json::quote(v.find("s")->text), "q").text == v.find("s")->text);

  auto error = [](const std::string& text) {
    try {
      json::parse(text, "t.json", 8);
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error("{\"a\":1,}") ==
        "t.json: invalid JSON at byte offset 15: expected a string key, found '}'");
  CHECK(error("{\"a\":1} x") ==
        "t.json: invalid JSON at byte offset 16: expected nothing after the top-level value, found "
        "'x'");
  CHECK_THAT(error("{\"a\":1,\"a\":2}"), Contains("byte offset 15") && Contains("already used"));
  CHECK_THAT(error("[01]"), Contains("byte offset 10") && Contains("leading zeros"));
  CHECK_THAT(error("\"a\tb\""), Contains("control character"));
  CHECK_THAT(error(std::string(100, '[')), Contains("at most 64 levels"));
  CHECK_THAT(error(""), Contains("found the end of the text"));
  CHECK_FALSE(json::parse("18446744073709551616", "t").as_uint64(u));  // 2^64 does not fit
}

TEST_CASE("quoted strings are valid JSON whatever their bytes", "[json]") {
  // Escapes JSON requires; UTF-8 kept as it is.
  CHECK(json::quote("a\"b\\c\nd\x01") == "\"a\\\"b\\\\c\\nd\\u0001\"");
  CHECK(json::quote("caf\xc3\xa9") == "\"caf\xc3\xa9\"");
  // A path in Latin-1 (0xe9) and a stray continuation byte: each becomes U+FFFD, so a reader that
  // insists on UTF-8 (Python's json, jq) still reads the record. Once copied as they were.
  const std::string quoted = json::quote("runs/caf\xe9/\x80x");
  CHECK(quoted == "\"runs/caf\xef\xbf\xbd/\xef\xbf\xbdx\"");
  CHECK(json::parse(quoted, "q").text == "runs/caf\xef\xbf\xbd/\xef\xbf\xbdx");
}
