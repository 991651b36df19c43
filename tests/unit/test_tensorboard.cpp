// TensorBoard event files at the byte level: CRC-32C, TFRecord framing, Event encoding. The
// integration test decodes real files with protobuf itself
// (tests/integration/test_run_outputs.cpp).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>

#include "core/crc32c.hpp"
#include "train/tensorboard.hpp"

using namespace mnist;

namespace {
uint32_t u32_at(const std::string& s, std::size_t offset) {
  uint32_t v;
  std::memcpy(&v, s.data() + offset, 4);
  return v;
}
}  // namespace

TEST_CASE("CRC-32C matches the Castagnoli check values", "[tensorboard]") {
  // RFC 3720 (iSCSI) appendix B.4 and the usual "123456789" check value.
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), ones.size()) == 0x62A8AB43u);
  CHECK(crc32c("", 0) == 0u);
  const uint32_t plain = crc32c("123456789", 9);
  CHECK(masked_crc32c("123456789", 9) == (((plain >> 15) | (plain << 17)) + 0xa282ead8u));
}

TEST_CASE("a record is length, its CRC, the data and the data's CRC", "[tensorboard]") {
  const std::string data = "hello";
  const std::string record = tensorboard::frame_record(data);
  REQUIRE(record.size() == 8 + 4 + data.size() + 4);
  uint64_t length;
  std::memcpy(&length, record.data(), 8);
  CHECK(length == data.size());
  CHECK(u32_at(record, 8) == masked_crc32c(record.data(), 8));
  CHECK(record.substr(12, data.size()) == data);
  CHECK(u32_at(record, 12 + data.size()) == masked_crc32c(data.data(), data.size()));
}

TEST_CASE("an Event carries wall time, step, version and scalar values in protobuf fields",
          "[tensorboard]") {
  const std::string version = tensorboard::encode_event(1.5, 0, {}, "brain.Event:2");
  // field 1 (double): key 0x09 + 8 bytes; field 2 (varint): 0x10 0x00; field 3 (bytes): 0x1a len.
  REQUIRE(version.size() == 9 + 2 + 2 + 13);
  CHECK(static_cast<unsigned char>(version[0]) == 0x09);
  double wall;
  std::memcpy(&wall, version.data() + 1, 8);
  CHECK(wall == 1.5);
  CHECK(version.substr(9, 2) == std::string("\x10\x00", 2));
  CHECK(version.substr(11, 2) == "\x1a\x0d");
  CHECK(version.substr(13) == "brain.Event:2");

  // step 300 = varint 0xac 0x02; summary (field 5) holds one value (field 1) with tag (field 1)
  // and simple_value (field 2, fixed32).
  const std::string scalar = tensorboard::encode_event(0, 300, {{"lr", 0.5f}});
  const std::string value = std::string("\x0a\x02lr\x15", 5) + std::string("\x00\x00\x00\x3f", 4);
  const std::string summary = "\x0a" + std::string(1, char(value.size())) + value;
  CHECK(scalar.substr(9) ==
        std::string("\x10\xac\x02", 3) + "\x2a" + std::string(1, char(summary.size())) + summary);
}
