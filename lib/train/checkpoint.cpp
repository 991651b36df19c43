// Checkpoints as safetensors: writer, validating reader, the resume check, the rolling folder.
// The math-config text and hash a checkpoint records are config/math_config.cpp's.
//
// Checkpoints are small (three copies of ~62k floats plus metadata), so a file is built whole in
// memory and written in one go; reading validates the header completely before any tensor byte is
// looked at, so a damaged file can only produce a DataError, never a half-filled state.

#include "train/checkpoint.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <spdlog/spdlog.h>

#include "build_info.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json.hpp"
#include "core/printable.hpp"

namespace mnist {
namespace {

namespace fs = std::filesystem;

// safetensors stores little-endian data and we copy floats byte for byte.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint I/O copies floats as raw bytes and assumes a little-endian host");
static_assert(sizeof(float) == 4, "safetensors F32 is 4 bytes");

constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kMomentPrefix = "optimizer.m.";
constexpr const char* kVariancePrefix = "optimizer.v.";

const std::vector<std::string>& required_metadata() {
  static const std::vector<std::string> keys = {
      kMetaFormatVersion, kMetaStep,        kMetaEpoch,     kMetaSampler,
      kMetaSeed,          kMetaOptimizer,   kMetaConfig,    kMetaConfigHash,
      kMetaMathConfig,    kMetaToolVersion, kMetaDataSource};
  return keys;
}

// The selection's keys, all written or none.
const std::vector<std::string>& selection_metadata() {
  static const std::vector<std::string> keys = {kMetaBestStep, kMetaBestAccuracy, kMetaBestLoss,
                                                kMetaEvaluationsSinceBest, kMetaLastValidationStep};
  return keys;
}

// Which CheckpointState vector a tensor lives in.
enum class Buffer { params, state, moment1, moment2 };

// The vector `b` names in `c` (CheckpointState, const or not).
template <class State>
auto& buffer_of(State& c, Buffer b) {
  switch (b) {
    case Buffer::params:
      return c.params;
    case Buffer::state:
      return c.state;
    case Buffer::moment1:
      return c.moment1;
    case Buffer::moment2:
      return c.moment2;
  }
  return c.params;
}

// One tensor of the file: where its floats live in a CheckpointState.
struct TensorRef {
  std::string name;
  std::vector<int> shape;
  std::size_t count = 0;
  Buffer buffer = Buffer::params;
  std::size_t offset = 0;  // in floats, into the buffer
};

// The tensors a checkpoint of `model` holds, in file order.
std::vector<TensorRef> tensor_list(const Model& model, bool adam) {
  std::vector<TensorRef> out;
  auto add = [&](const std::vector<TensorSlot>& slots, const std::string& prefix, Buffer buffer) {
    for (const TensorSlot& s : slots)
      out.push_back({prefix + s.name, s.shape, s.count, buffer, s.offset});
  };
  add(model.params(), "", Buffer::params);
  add(model.state(), "", Buffer::state);
  add(model.params(), kMomentPrefix, Buffer::moment1);
  if (adam) add(model.params(), kVariancePrefix, Buffer::moment2);
  return out;
}

std::string shape_str(const std::vector<int>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// ---- reading helpers --------------------------------------------------------------------------

uint64_t parse_u64(const std::string& path, const std::string& key, const std::string& text) {
  json::Value v;
  v.type = json::Type::number;
  v.text = text;
  uint64_t out = 0;
  if (!v.as_uint64(out))
    MNIST_THROW(DataError, "'{}': metadata '{}' is \"{}\", expected a non-negative integer", path,
                key, printable(text));
  return out;
}

std::vector<int> read_shape(const std::string& path, const std::string& name,
                            const json::Value& v) {
  if (v.type != json::Type::array)
    MNIST_THROW(DataError, "'{}': tensor '{}': shape at byte offset {} is {}, expected an array",
                path, name, v.offset, json::to_string(v.type));
  std::vector<int> shape;
  for (const json::Value& d : v.items) {
    uint64_t n = 0;
    if (!d.as_uint64(n) || n > static_cast<uint64_t>(INT32_MAX))
      MNIST_THROW(DataError,
                  "'{}': tensor '{}': shape entry at byte offset {} is '{}', expected a "
                  "non-negative integer",
                  path, name, d.offset,
                  d.type == json::Type::number ? d.text : json::to_string(d.type));
    shape.push_back(static_cast<int>(n));
  }
  return shape;
}

struct FileTensor {
  std::string name;
  uint64_t begin = 0, end = 0;
  const TensorRef* ref = nullptr;
};

std::string metadata_text(const std::map<std::string, std::string>& m, const std::string& key) {
  const auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

}  // namespace

// ---- save -------------------------------------------------------------------------------------

void save_checkpoint(const std::string& path, const Model& model, const Experiment& experiment,
                     const CheckpointState& ckpt) {
  const bool adam = experiment.optimizer.kind == OptimizerKind::adam;
  MNIST_CHECK(ckpt.params.size() == model.param_count() &&
                  ckpt.state.size() == model.state_count() &&
                  ckpt.moment1.size() == model.param_count() &&
                  ckpt.moment2.size() == (adam ? model.param_count() : 0),
              "checkpoint buffers (params {}, state {}, moment1 {}, moment2 {}) do not match the "
              "model (params {}, state {}) and optimizer {} (moment2 is empty for sgd)",
              ckpt.params.size(), ckpt.state.size(), ckpt.moment1.size(), ckpt.moment2.size(),
              model.param_count(), model.state_count(), to_string(experiment.optimizer.kind));
  MNIST_CHECK(ckpt.step >= 0, "checkpoint step {} is negative", ckpt.step);

  std::vector<std::pair<std::string, std::string>> meta = {
      {kMetaFormatVersion, kCheckpointFormatVersion},
      {kMetaStep, std::to_string(ckpt.step)},
      {kMetaEpoch, fmt::format("{}", ckpt.epoch)},
      {kMetaSampler, kSamplerName},
      {kMetaSeed, std::to_string(experiment.seed)},
      {kMetaOptimizer, to_string(experiment.optimizer.kind)},
      {kMetaConfig, to_yaml(experiment)},
      {kMetaConfigHash, math_config_hash(experiment)},
      {kMetaMathConfig, math_config_text(experiment)},
      {kMetaToolVersion, MNIST_VERSION},
      {kMetaDataSource, ckpt.data_source}};
  const SelectionState& sel = ckpt.selection;
  if (sel.best_step >= 0) {
    // 17 significant digits: the doubles read back exactly, so a resumed run compares its
    // evaluations against the very figure the uninterrupted run would have.
    meta.emplace_back(kMetaBestStep, std::to_string(sel.best_step));
    meta.emplace_back(kMetaBestAccuracy, fmt::format("{:.17g}", sel.best_accuracy));
    meta.emplace_back(kMetaBestLoss, fmt::format("{:.17g}", sel.best_loss));
    meta.emplace_back(kMetaEvaluationsSinceBest, std::to_string(sel.evaluations_since_best));
    meta.emplace_back(kMetaLastValidationStep, std::to_string(sel.last_step));
  }
  const auto& required = required_metadata();
  const auto& selection = selection_metadata();
  for (const auto& [key, value] : ckpt.metadata) {
    MNIST_CHECK(std::find(required.begin(), required.end(), key) == required.end() &&
                    std::find(selection.begin(), selection.end(), key) == selection.end(),
                "extra checkpoint metadata key '{}' is one the checkpoint writer sets itself", key);
    meta.emplace_back(key, value);
  }

  // The header: metadata first, as the reference implementation writes it, then the tensors in
  // data order.
  const std::vector<TensorRef> tensors = tensor_list(model, adam);
  std::string header = "{";
  header += json::quote(kMetadataKey) + ":{";
  for (std::size_t i = 0; i < meta.size(); ++i) {
    if (i > 0) header += ',';
    header += json::quote(meta[i].first) + ':' + json::quote(meta[i].second);
  }
  header += '}';
  uint64_t begin = 0;
  for (const TensorRef& t : tensors) {
    const uint64_t end = begin + t.count * sizeof(float);
    header += fmt::format(",{}:{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          json::quote(t.name), fmt::join(t.shape, ","), begin, end);
    begin = end;
  }
  header += '}';
  // Pad with spaces so the data section starts 8-byte aligned (the reference does the same, and
  // readers that map the file may rely on it).
  header.append((8 - header.size() % 8) % 8, ' ');

  std::string bytes;
  bytes.reserve(8 + header.size() + begin);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((n >> (8 * i)) & 0xff);
  bytes += header;
  for (const TensorRef& t : tensors) {
    bytes.append(reinterpret_cast<const char*>(buffer_of(ckpt, t.buffer).data() + t.offset),
                 t.count * sizeof(float));
  }
  write_file_atomically(path, bytes.data(), bytes.size());
}

// ---- load -------------------------------------------------------------------------------------

namespace {
// The file's header, validated, and its metadata; tensors are not read yet.
struct Header {
  json::Value root;
  uint64_t file_size = 0, data_size = 0;
  CheckpointState ckpt;  // step, epoch, data_source and metadata filled
};

// A metadata number written with {:.17g}: finite, the whole text consumed.
double parse_number(const std::string& path, const std::string& key, const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v))
    MNIST_THROW(DataError, "'{}': metadata '{}' is \"{}\", expected a finite number", path, key,
                printable(text));
  return v;
}

// The selection's metadata (all of it or none) as a SelectionState; best_step -1 when absent.
SelectionState read_selection(const std::string& path,
                              const std::map<std::string, std::string>& meta) {
  SelectionState sel;
  std::vector<std::string> present, absent;
  for (const std::string& key : selection_metadata())
    (meta.count(key) ? present : absent).push_back(key);
  if (present.empty()) return sel;
  if (!absent.empty())
    MNIST_THROW(DataError,
                "'{}': metadata has {} but lacks {}: the best checkpoint's state is written whole "
                "(damaged, or edited)",
                path, fmt::join(present, ", "), fmt::join(absent, ", "));
  auto step = [&](const char* key) {
    const uint64_t v = parse_u64(path, key, meta.at(key));
    if (v > static_cast<uint64_t>(INT64_MAX))
      MNIST_THROW(DataError, "'{}': metadata {} {} is out of range", path, key, v);
    return static_cast<int64_t>(v);
  };
  sel.best_step = step(kMetaBestStep);
  sel.last_step = step(kMetaLastValidationStep);
  sel.best_accuracy = parse_number(path, kMetaBestAccuracy, meta.at(kMetaBestAccuracy));
  sel.best_loss = parse_number(path, kMetaBestLoss, meta.at(kMetaBestLoss));
  const int64_t since = step(kMetaEvaluationsSinceBest);
  if (since > INT32_MAX || sel.last_step < sel.best_step)
    MNIST_THROW(DataError,
                "'{}': metadata {} {} with {} {} and {} {} do not describe a selection (the last "
                "evaluation comes at or after the best)",
                path, kMetaEvaluationsSinceBest, since, kMetaBestStep, sel.best_step,
                kMetaLastValidationStep, sel.last_step);
  sel.evaluations_since_best = static_cast<int>(since);
  return sel;
}

Header read_header(const std::string& path) {
  // A regular file only: a FIFO left where a checkpoint should be is refused, not waited on.
  InputFile in(path, "checkpoint");
  const uint64_t file_size = in.size();
  if (file_size < 8)
    MNIST_THROW(DataError,
                "'{}' is {} bytes, shorter than the 8-byte header length every safetensors file "
                "starts with (truncated or empty)",
                path, file_size);
  unsigned char len_bytes[8];
  if (in.read(len_bytes, 8) != 8)
    MNIST_THROW(DataError, "cannot read the first 8 bytes of '{}'", path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeaderBytes)
    MNIST_THROW(DataError,
                "'{}': header length at byte offset 0 is {}, larger than safetensors' limit of {} "
                "bytes (damaged, or not a safetensors file)",
                path, header_len, kMaxHeaderBytes);
  if (header_len > file_size - 8)
    MNIST_THROW(DataError,
                "'{}': header length at byte offset 0 is {} but only {} bytes follow it (the file "
                "is {} bytes: truncated?)",
                path, header_len, file_size - 8, file_size);
  std::string header(header_len, '\0');
  if (in.read(header.data(), header_len) != header_len)
    MNIST_THROW(DataError, "cannot read the {}-byte header of '{}'", header_len, path);
  const uint64_t data_size = file_size - 8 - header_len;

  const json::Value root = json::parse(header, fmt::format("'{}' header", path), 8);
  if (root.type != json::Type::object)
    MNIST_THROW(DataError, "'{}': the header (byte offset 8) is {}, expected a JSON object", path,
                json::to_string(root.type));

  // Metadata first: the optimizer it names decides which tensors must be present.
  Header h;
  CheckpointState& ckpt = h.ckpt;
  if (const json::Value* meta = root.find(kMetadataKey)) {
    if (meta->type != json::Type::object)
      MNIST_THROW(DataError, "'{}': {} at byte offset {} is {}, expected an object of strings",
                  path, kMetadataKey, meta->offset, json::to_string(meta->type));
    for (const auto& [key, value] : meta->members) {
      if (value.type != json::Type::string)
        MNIST_THROW(DataError,
                    "'{}': metadata '{}' at byte offset {} is {}; safetensors metadata values are "
                    "strings",
                    path, printable(key), value.offset, json::to_string(value.type));
      ckpt.metadata[key] = value.text;
    }
  }
  std::vector<std::string> missing_meta;
  for (const std::string& key : required_metadata())
    if (ckpt.metadata.count(key) == 0) missing_meta.push_back(key);
  if (!missing_meta.empty())
    MNIST_THROW(DataError,
                "'{}': metadata lacks required keys: {} (not written by mnist-train, or damaged)",
                path, fmt::join(missing_meta, ", "));
  const std::string version = ckpt.metadata[kMetaFormatVersion];
  if (version != kCheckpointFormatVersion)
    MNIST_THROW(DataError, "'{}': format_version is \"{}\"; this tool reads version {}", path,
                printable(version), kCheckpointFormatVersion);
  const uint64_t step = parse_u64(path, kMetaStep, ckpt.metadata[kMetaStep]);
  if (step > static_cast<uint64_t>(INT64_MAX))
    MNIST_THROW(DataError, "'{}': metadata step {} is out of range", path, step);
  ckpt.step = static_cast<int64_t>(step);
  parse_u64(path, kMetaSeed, ckpt.metadata[kMetaSeed]);
  {
    const std::string& text = ckpt.metadata[kMetaEpoch];
    std::size_t used = 0;
    try {
      ckpt.epoch = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size())
      MNIST_THROW(DataError, "'{}': metadata epoch is \"{}\", expected a number", path, text);
  }
  const std::string optimizer = ckpt.metadata[kMetaOptimizer];
  if (!from_string<OptimizerKind>(optimizer))
    MNIST_THROW(DataError, "'{}': metadata optimizer is \"{}\", expected \"{}\"", path, optimizer,
                fmt::join(spelling_names<OptimizerKind>(), "\" or \""));
  const std::string expected_hash = math_config_hash_of(ckpt.metadata[kMetaMathConfig]);
  if (ckpt.metadata[kMetaConfigHash] != expected_hash)
    MNIST_THROW(DataError,
                "'{}': metadata config_hash \"{}\" does not match its own math_config (whose hash "
                "is {}): the metadata was edited or damaged",
                path, ckpt.metadata[kMetaConfigHash], expected_hash);
  ckpt.data_source = ckpt.metadata[kMetaDataSource];
  ckpt.selection = read_selection(path, ckpt.metadata);

  h.root = root;
  h.file_size = file_size;
  h.data_size = data_size;
  return h;
}
}  // namespace

CheckpointState read_checkpoint_metadata(const std::string& path) {
  return read_header(path).ckpt;
}

CheckpointState load_checkpoint(const std::string& path, const Model& model) {
  Header h = read_header(path);
  const json::Value& root = h.root;
  const uint64_t data_size = h.data_size, file_size = h.file_size;
  CheckpointState ckpt = std::move(h.ckpt);
  const std::string optimizer = ckpt.metadata[kMetaOptimizer];
  const bool adam = from_string<OptimizerKind>(optimizer) == OptimizerKind::adam;
  ckpt.params.assign(model.param_count(), 0.0f);
  ckpt.state.assign(model.state_count(), 0.0f);
  ckpt.moment1.assign(model.param_count(), 0.0f);
  ckpt.moment2.assign(adam ? model.param_count() : 0, 0.0f);
  const std::vector<TensorRef> expected = tensor_list(model, adam);
  std::map<std::string, const TensorRef*> by_name;
  for (const TensorRef& t : expected) by_name[t.name] = &t;

  std::vector<FileTensor> found;
  for (const auto& [name, entry] : root.members) {
    if (name == kMetadataKey) continue;
    if (entry.type != json::Type::object)
      MNIST_THROW(DataError,
                  "'{}': tensor '{}' at byte offset {} is {}, expected an object with dtype, shape "
                  "and data_offsets",
                  path, name, entry.offset, json::to_string(entry.type));
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (entry.find(key) == nullptr)
        MNIST_THROW(DataError, "'{}': tensor '{}' (byte offset {}) lacks '{}'", path, name,
                    entry.offset, key);
    for (const auto& member : entry.members)
      if (member.first != "dtype" && member.first != "shape" && member.first != "data_offsets")
        MNIST_THROW(DataError,
                    "'{}': tensor '{}' has an unexpected key '{}' at byte offset {} (allowed: "
                    "dtype, shape, data_offsets)",
                    path, name, member.first, member.second.offset);
    const json::Value& dtype = *entry.find("dtype");
    if (dtype.type != json::Type::string || dtype.text != "F32")
      MNIST_THROW(DataError,
                  "'{}': tensor '{}' has dtype {} (byte offset {}); checkpoints hold F32 only",
                  path, name,
                  dtype.type == json::Type::string ? json::quote(dtype.text)
                                                   : std::string(json::to_string(dtype.type)),
                  dtype.offset);
    const std::vector<int> shape = read_shape(path, name, *entry.find("shape"));
    const json::Value& offsets = *entry.find("data_offsets");
    FileTensor ft;
    ft.name = name;
    if (offsets.type != json::Type::array || offsets.items.size() != 2 ||
        !offsets.items[0].as_uint64(ft.begin) || !offsets.items[1].as_uint64(ft.end))
      MNIST_THROW(DataError,
                  "'{}': tensor '{}': data_offsets at byte offset {} must be [begin, end], two "
                  "non-negative integers",
                  path, name, offsets.offset);
    if (ft.end < ft.begin)
      MNIST_THROW(DataError, "'{}': tensor '{}': data_offsets [{}, {}] end before they begin", path,
                  name, ft.begin, ft.end);
    if (ft.end > data_size)
      MNIST_THROW(DataError,
                  "'{}': tensor '{}': data_offsets [{}, {}] run past the end of the file: the data "
                  "section holds {} bytes (file {} bytes; truncated?)",
                  path, name, ft.begin, ft.end, data_size, file_size);
    const auto known = by_name.find(name);
    if (known == by_name.end())
      MNIST_THROW(DataError,
                  "'{}': unknown tensor '{}' (shape {}): the model has no such parameter, state or "
                  "{} optimizer slot (a checkpoint of a different network?)",
                  path, name, shape_str(shape), optimizer);
    ft.ref = known->second;
    if (shape != ft.ref->shape)
      MNIST_THROW(DataError,
                  "'{}': tensor '{}' has shape {} in the file, but the model's slot '{}' is {}",
                  path, name, shape_str(shape), ft.ref->name, shape_str(ft.ref->shape));
    if (ft.end - ft.begin != ft.ref->count * sizeof(float))
      MNIST_THROW(DataError,
                  "'{}': tensor '{}': data_offsets [{}, {}] span {} bytes, but shape {} of F32 "
                  "needs {}",
                  path, name, ft.begin, ft.end, ft.end - ft.begin, shape_str(shape),
                  ft.ref->count * sizeof(float));
    found.push_back(ft);
  }
  if (found.size() != expected.size()) {
    std::vector<std::string> missing;
    for (const TensorRef& t : expected) {
      const bool present = std::any_of(found.begin(), found.end(),
                                       [&](const FileTensor& f) { return f.name == t.name; });
      if (!present) missing.push_back(t.name);
    }
    const std::size_t shown = std::min<std::size_t>(missing.size(), 8);
    MNIST_THROW(
        DataError, "'{}': missing {} tensor(s) the model needs: {}{}", path, missing.size(),
        fmt::join(missing.begin(), missing.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
        missing.size() > shown ? fmt::format(" and {} more", missing.size() - shown) : "");
  }

  // safetensors' rule: the tensors tile the data section exactly, with no gap and no overlap.
  std::sort(found.begin(), found.end(),
            [](const FileTensor& a, const FileTensor& b) { return a.begin < b.begin; });
  uint64_t expected_begin = 0;
  const FileTensor* previous = nullptr;
  for (const FileTensor& f : found) {
    if (f.begin < expected_begin)
      MNIST_THROW(DataError, "'{}': tensor '{}' data_offsets [{}, {}] overlap tensor '{}' [{}, {}]",
                  path, f.name, f.begin, f.end, previous->name, previous->begin, previous->end);
    if (f.begin > expected_begin)
      MNIST_THROW(DataError,
                  "'{}': tensor '{}' data_offsets [{}, {}] leave a gap of {} bytes after {}", path,
                  f.name, f.begin, f.end, f.begin - expected_begin,
                  previous ? fmt::format("tensor '{}'", previous->name)
                           : std::string("the start of the data section"));
    expected_begin = f.end;
    previous = &f;
  }
  if (expected_begin != data_size)
    MNIST_THROW(DataError,
                "'{}': the data section holds {} bytes but the tensors cover {}: {} unexplained "
                "trailing bytes",
                path, data_size, expected_begin, data_size - expected_begin);

  // Everything checked: now the bytes, which start after the length field and the header.
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(file_size - data_size));
  std::string data(data_size, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data_size));
  if (!in)
    MNIST_THROW(DataError, "cannot read the {}-byte data section of '{}' (changed while reading?)",
                data_size, path);
  for (const FileTensor& f : found) {
    float* values = buffer_of(ckpt, f.ref->buffer).data() + f.ref->offset;
    std::memcpy(values, data.data() + f.begin, f.end - f.begin);
    // A NaN or an infinity would train into NaN or evaluate to garbage: such a file is refused
    // as damaged (and --resume auto passes over it to an older one).
    for (std::size_t i = 0; i < f.ref->count; ++i)
      if (!std::isfinite(values[i]))
        MNIST_THROW(DataError,
                    "'{}': tensor '{}' holds {} at index {} (byte offset {}); a checkpoint must "
                    "hold finite values only (damaged, or saved from a diverged run)",
                    path, f.name, values[i], i,
                    file_size - data_size + f.begin + i * sizeof(float));
  }
  return ckpt;
}

// ---- resume check -----------------------------------------------------------------------------

void check_resume_compatible(const CheckpointState& ckpt, const Experiment& experiment,
                             const std::string& path) {
  const std::string sampler = metadata_text(ckpt.metadata, kMetaSampler);
  if (sampler != kSamplerName)
    MNIST_THROW(ConfigError,
                "cannot resume from '{}': it was written with sampler \"{}\", this tool's sampler "
                "is \"{}\", so the data order would not continue",
                path, sampler, kSamplerName);
  const std::string saved_hash = metadata_text(ckpt.metadata, kMetaConfigHash);
  if (saved_hash == math_config_hash(experiment)) return;
  const std::vector<std::string> diff =
      math_config_differences(experiment, metadata_text(ckpt.metadata, kMetaMathConfig));
  const std::size_t shown = std::min<std::size_t>(diff.size(), 12);
  MNIST_THROW(ConfigError,
              "cannot resume from '{}': its config hash {} differs from this config's {}; "
              "settings that change training differ:\n  {}{}",
              path, saved_hash, math_config_hash(experiment),
              fmt::join(diff.begin(), diff.begin() + static_cast<std::ptrdiff_t>(shown), "\n  "),
              diff.size() > shown ? fmt::format("\n  ... and {} more", diff.size() - shown) : "");
}

// ---- the folder -------------------------------------------------------------------------------

namespace {
constexpr const char* kBestName = "best.safetensors";

// "step-000123.safetensors" -> 123; -1 for any other name.
int64_t step_of(const std::string& filename) {
  static const std::string prefix = "step-", suffix = ".safetensors";
  if (filename.size() <= prefix.size() + suffix.size() || filename.rfind(prefix, 0) != 0 ||
      filename.compare(filename.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits =
      filename.substr(prefix.size(), filename.size() - prefix.size() - suffix.size());
  if (digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}
}  // namespace

CheckpointDirectory::CheckpointDirectory(const std::string& run_dir, int keep,
                                         std::shared_ptr<spdlog::logger> logger)
    : dir_((fs::path(run_dir) / "checkpoints").string()),
      keep_(keep),
      log_(logger ? std::move(logger) : spdlog::default_logger()) {
  MNIST_CHECK(keep_ >= 1, "checkpoint.keep must be at least 1, got {}", keep_);
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec)
    MNIST_THROW(RuntimeError, "cannot create the checkpoint folder '{}': {}", dir_, ec.message());
  // A writer killed mid-write leaves ".step-N.safetensors.tmp.<pid>" (or
  // ".best.safetensors.tmp.<pid>"); never a final name.
  // Collected first: removing entries while iterating a directory is unspecified behaviour.
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if ((name.rfind(".step-", 0) == 0 || name.rfind(std::string(".") + kBestName, 0) == 0) &&
        name.find(".safetensors.tmp.") != std::string::npos)
      stale.push_back(entry.path());
  }
  for (const fs::path& p : stale) {
    log_->warn("removing '{}', left by a checkpoint write that did not finish", p.string());
    fs::remove(p, ec);
  }
}

std::string CheckpointDirectory::path_for(int64_t step) const {
  return (fs::path(dir_) / fmt::format("step-{:06d}.safetensors", step)).string();
}

std::string CheckpointDirectory::best_path() const {
  return (fs::path(dir_) / kBestName).string();
}

std::string CheckpointDirectory::save_best(const Model& model, const Experiment& experiment,
                                           const CheckpointState& ckpt) {
  const std::string path = best_path();
  save_checkpoint(path, model, experiment, ckpt);
  return path;
}

std::vector<std::string> CheckpointDirectory::list() const {
  std::vector<std::pair<int64_t, std::string>> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file(ec)) files.emplace_back(step, entry.path().string());
  }
  if (ec)
    MNIST_THROW(RuntimeError, "cannot list the checkpoint folder '{}': {}", dir_, ec.message());
  std::sort(files.begin(), files.end());
  std::vector<std::string> out;
  for (auto& f : files) out.push_back(std::move(f.second));
  return out;
}

std::string CheckpointDirectory::save(const Model& model, const Experiment& experiment,
                                      const CheckpointState& ckpt) {
  const std::string path = path_for(ckpt.step);
  save_checkpoint(path, model, experiment, ckpt);
  // Oldest first; the file just written always survives, even when a folder left by an earlier
  // run holds higher step numbers.
  std::vector<std::string> files = list();
  files.erase(std::remove(files.begin(), files.end(), path), files.end());
  const std::size_t others_kept = static_cast<std::size_t>(keep_ - 1);
  for (std::size_t i = 0; i + others_kept < files.size(); ++i) {
    std::error_code ec;
    fs::remove(files[i], ec);
    if (ec) log_->warn("cannot delete old checkpoint '{}': {}", files[i], ec.message());
  }
  return path;
}

std::optional<CheckpointDirectory::Found> CheckpointDirectory::latest_valid(
    const Model& model) const {
  const std::vector<std::string> files = list();
  std::vector<std::string> skipped;
  for (auto it = files.rbegin(); it != files.rend(); ++it) {
    try {
      CheckpointState state = load_checkpoint(*it, model);
      return Found{*it, std::move(state), std::move(skipped)};
    } catch (const DataError& e) {
      log_->warn("skipping damaged checkpoint: {}", e.what());
      skipped.push_back(e.what());
    }
  }
  return std::nullopt;
}

}  // namespace mnist
