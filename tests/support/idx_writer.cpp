#include "support/idx_writer.hpp"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace mnist::test {
namespace {

void append_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

}  // namespace

std::vector<uint8_t> idx_images_bytes(uint32_t count, uint32_t rows, uint32_t cols,
                                      const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> out;
  append_be32(out, 0x00000803);
  append_be32(out, count);
  append_be32(out, rows);
  append_be32(out, cols);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

std::vector<uint8_t> idx_labels_bytes(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> out;
  append_be32(out, 0x00000801);
  append_be32(out, static_cast<uint32_t>(labels.size()));
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& bytes) {
  z_stream zs{};
  // windowBits 15 + 16 asks deflate for a gzip wrapper instead of zlib's.
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    throw std::runtime_error("gzip_bytes: deflateInit2 failed");
  }
  std::vector<uint8_t> out(deflateBound(&zs, bytes.size()) + 32);
  zs.next_in = const_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw std::runtime_error("gzip_bytes: deflate did not finish");
  return out;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes,
                 Compression compression) {
  const std::vector<uint8_t> data = compression == Compression::gzip ? gzip_bytes(bytes) : bytes;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("write_bytes: cannot create " + path);
  const size_t n = data.empty() ? 0 : std::fwrite(data.data(), 1, data.size(), f);
  const bool ok = std::fclose(f) == 0 && n == data.size();
  if (!ok) throw std::runtime_error("write_bytes: cannot write " + path);
}

void write_idx_images(const std::string& path, uint32_t count, uint32_t rows, uint32_t cols,
                      const std::vector<uint8_t>& pixels, Compression compression) {
  write_bytes(path, idx_images_bytes(count, rows, cols, pixels), compression);
}

void write_idx_labels(const std::string& path, const std::vector<uint8_t>& labels,
                      Compression compression) {
  write_bytes(path, idx_labels_bytes(labels), compression);
}

ScratchDir::ScratchDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "mnist-test-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("ScratchDir: mkdtemp failed");
  path_ = tmpl;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;  // a destructor never throws; a leftover temp dir is harmless
  std::filesystem::remove_all(path_, ec);
}

std::string ScratchDir::file(const std::string& name) const {
  return path_ + "/" + name;
}

}  // namespace mnist::test
