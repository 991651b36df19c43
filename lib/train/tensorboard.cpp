#include "train/tensorboard.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"

namespace mnist {

namespace tensorboard {

namespace {

// Protobuf wire format: a key is (field number << 3 | wire type); varints are little-endian base
// 128; wire type 1 is 8 bytes, 2 is length-delimited, 5 is 4 bytes (all little-endian).
enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, WireType type) {
  put_varint(out, field << 3 | type);
}

template <typename T>
void put_little_endian(std::string& out, T value) {
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // x86-64 and AArch64 Linux are little-endian
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

}  // namespace

std::string encode_event(double wall_time, int64_t step,
                         const std::vector<std::pair<std::string, float>>& scalars,
                         const std::string& file_version) {
  std::string event;
  put_key(event, 1, kFixed64);
  put_little_endian(event, wall_time);
  put_key(event, 2, kVarint);
  put_varint(event, static_cast<uint64_t>(step));  // int64: two's complement as a varint
  if (!file_version.empty()) put_bytes(event, 3, file_version);
  if (!scalars.empty()) {
    std::string summary;
    for (const auto& [tag, value] : scalars) {
      std::string v;
      put_bytes(v, 1, tag);
      put_key(v, 2, kFixed32);
      put_little_endian(v, value);
      put_bytes(summary, 1, v);
    }
    put_bytes(event, 5, summary);
  }
  return event;
}

std::string frame_record(const std::string& data) {
  std::string record;
  const uint64_t length = data.size();
  put_little_endian(record, length);
  put_little_endian(record, masked_crc32c(record.data(), sizeof(length)));
  record += data;
  put_little_endian(record, masked_crc32c(data.data(), data.size()));
  return record;
}

}  // namespace tensorboard

namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    MNIST_THROW(RuntimeError, "cannot create the TensorBoard folder {}: {}", dir, ec.message());
  // TensorBoard reads every events.out.tfevents.* file of a folder in name order: the time in the
  // name keeps a resumed run's file after the first one.
  const double now = wall_seconds();
  path_ = fmt::format("{}/events.out.tfevents.{}.{}", dir, static_cast<int64_t>(now), host_name());
  require_regular_or_absent(path_, "output.tensorboard");
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) MNIST_THROW(RuntimeError, "cannot write the TensorBoard event file {}", path_);
  out_ << tensorboard::frame_record(tensorboard::encode_event(now, 0, {}, "brain.Event:2"));
  out_.flush();
}

void TensorBoardWriter::write(int64_t step,
                              const std::vector<std::pair<std::string, float>>& scalars) {
  out_ << tensorboard::frame_record(tensorboard::encode_event(wall_seconds(), step, scalars));
  // Flushed per record: TensorBoard shows a live run, and a killed run keeps what it logged.
  out_.flush();
  if (!out_) MNIST_THROW(RuntimeError, "cannot write the TensorBoard event file {}", path_);
}

void TensorBoardWriter::on_step(const StepRecord& r) {
  write(r.step, {{"train/loss", static_cast<float>(r.loss)},
                 {"train/accuracy", static_cast<float>(r.accuracy)},
                 {"lr", static_cast<float>(r.lr)},
                 {"samples_per_second", static_cast<float>(r.samples_per_second)}});
}

void TensorBoardWriter::on_eval(const EvalRecord& r) {
  // The best checkpoint's test figures belong to an earlier step than the curve has reached: they
  // are in summary.json, not on the test curve.
  if (r.of_best) return;
  if (r.split == EvalSplit::validation) {
    write(r.step, {{"validation/loss", static_cast<float>(r.loss)},
                   {"validation/accuracy", static_cast<float>(r.accuracy)}});
    return;
  }
  write(r.step, {{"eval/loss", static_cast<float>(r.loss)},
                 {"eval/accuracy", static_cast<float>(r.accuracy)}});
}

}  // namespace mnist
