#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of TFRecord framing.
// crc32c("123456789") == 0xE3069283.

#include <cstddef>
#include <cstdint>

namespace mnist {

uint32_t crc32c(const void* data, std::size_t size);
// TFRecord stores checksums "masked" so that a CRC of data holding CRCs stays well distributed:
// rotate right by 15 bits, add 0xa282ead8.
uint32_t masked_crc32c(const void* data, std::size_t size);

}  // namespace mnist
