#pragma once
// Lower-level IDX access under read_idx_pair / load_dataset (dataset.hpp), and the IDX writer the
// npm conversion uses.
//
// IDX layout (all integers big-endian):
//   images: magic 0x00000803, uint32 count, uint32 rows, uint32 cols, then count*rows*cols uint8
//   labels: magic 0x00000801, uint32 count, then count uint8
// A file may be gzip-compressed; gzip is recognised by its first two bytes (1f 8b), never by name.
// Every reader validates strictly and throws DataError naming the file, the byte offset or header
// field, what was expected and what was found. Offsets in messages are offsets into the IDX bytes,
// i.e. after decompression for a .gz file.

#include <cstdint>
#include <string>
#include <vector>

namespace mnist {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // uint8 data, 3 dimensions
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // uint8 data, 1 dimension
inline constexpr int kIdxImagesHeaderBytes = 16;
inline constexpr int kIdxLabelsHeaderBytes = 8;
// Plausibility limits: a side above this is almost certainly a misread header (e.g. a file that is
// not IDX at all), and the total pixel count must fit the int indexing used by the kernels.
inline constexpr uint32_t kIdxMaxSide = 4096;
inline constexpr uint64_t kIdxMaxPixels = 0x7fffffffull;

// Name of the file in the data directory that records where the files came from (written by
// scripts/fetch_data.sh). Format: `key: value` lines; `#` starts a comment line. load_dataset uses
// the keys `source` and `fetched` to fill Dataset::provenance; other keys (counts, sha256) are for
// people and for the fetch script's idempotency check.
inline constexpr const char* kProvenanceFile = "PROVENANCE";

struct IdxImages {
  int count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // [count, rows * cols], row-major
};

// The whole file as bytes, gunzipped if it starts with the gzip magic. Throws DataError when the
// file is missing, unreadable or not a regular file (a FIFO is refused, never waited on), when
// its contents pass `max_bytes` (reading stops there), or when the gzip stream is corrupt,
// truncated or followed by garbage.
std::vector<uint8_t> read_file_maybe_gzip(const std::string& path, uint64_t max_bytes);
// The first `n` bytes of the contents (fewer when it is shorter), read the same way.
std::vector<uint8_t> read_file_prefix(const std::string& path, std::size_t n);

// Parses one IDX file of the given kind. Checks: magic, non-zero and plausible dimensions, that
// the host has the memory the header promises, and that the file holds exactly header + data
// bytes (reports truncation or trailing bytes with both counts). Reads at most one byte more than
// the header promises, so a gzip bomb is refused after that byte.
IdxImages read_idx_images(const std::string& path);
// Labels are returned unchecked against a class count; read_idx_pair checks the range.
std::vector<uint8_t> read_idx_labels(const std::string& path);

// Writes uncompressed IDX files atomically: the bytes go to a temporary file in the same directory,
// which is then renamed over `path`, so a reader never sees a half-written file.
// pixels: [count, rows * cols]. Throws DataError when the file cannot be written.
void write_idx_images(const std::string& path, int count, int rows, int cols,
                      const std::vector<uint8_t>& pixels);
void write_idx_labels(const std::string& path, const std::vector<uint8_t>& labels);

// The one-line provenance summary of `dir` ("<source> (fetched <date>)"), or "" when the directory
// has no PROVENANCE file. Throws DataError when the file exists but has no `source:` line.
std::string read_provenance(const std::string& dir);

}  // namespace mnist
