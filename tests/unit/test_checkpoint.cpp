// Checkpoints: safetensors files that round-trip bit-exactly, are written atomically, roll over
// keeping the newest K, and are validated completely on reading, each kind of damage giving its
// own DataError that names the file; the math-config hash and its key-by-key difference list.
// (Another tool reading the layout: tests/integration/test_checkpoint_layout.cpp; the JSON reader
// itself: test_json.cpp.)

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/fnv1a.hpp"
#include "core/json.hpp"
#include "model/model.hpp"
#include "support/checkpoint_fixtures.hpp"
#include "support/idx_writer.hpp"
#include "support/synthetic.hpp"
#include "train/checkpoint.hpp"

using namespace mnist;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using mnist::test::checkpoint_experiment;
using mnist::test::filled_state;
using mnist::test::ScratchDir;
using mnist::test::values;

namespace {

// Same network with the last dense layer's bias removed: one parameter fewer.
Experiment experiment_without_last_bias() {
  std::string yaml = testing::small_network_yaml();
  const std::string last = "dense: {units: 10}";
  yaml.replace(yaml.find(last), last.size(), "dense: {units: 10, bias: false}");
  return parse_experiment(yaml, "ckpt-test-nobias.yaml");
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp must not see the null data() of an empty vector, even for 0 bytes (UBSan).
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  // Unlink first: ext4 flushes a file truncated and rewritten in place (auto_da_alloc), which
  // would make the thousands of rewrites below wait on the disk.
  std::error_code ec;
  fs::remove(path, ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return n;
}

std::string u64_le(uint64_t n) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// Rewrites `path` with its header transformed by `edit` (length field updated, data kept).
template <class Edit>
void edit_header(const std::string& path, Edit edit) {
  const std::string bytes = read_bytes(path);
  const uint64_t n = header_length(bytes);
  std::string header = bytes.substr(8, n);
  edit(header);
  write_bytes(path, u64_le(header.size()) + header + bytes.substr(8 + n));
}

void replace_once(std::string& text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
}

// JSON text of a parsed value (numbers as written), so tests can rebuild a header they edited.
std::string to_json(const json::Value& v) {
  switch (v.type) {
    case json::Type::null:
      return "null";
    case json::Type::boolean:
      return v.boolean ? "true" : "false";
    case json::Type::number:
      return v.text;
    case json::Type::string:
      return json::quote(v.text);
    case json::Type::array: {
      std::vector<std::string> items;
      for (const auto& item : v.items) items.push_back(to_json(item));
      return fmt::format("[{}]", fmt::join(items, ","));
    }
    case json::Type::object: {
      std::vector<std::string> members;
      for (const auto& [key, value] : v.members)
        members.push_back(json::quote(key) + ":" + to_json(value));
      return fmt::format("{{{}}}", fmt::join(members, ","));
    }
  }
  return "";
}

// The DataError message loading `path` gives; fails the test on success or another exception.
std::string load_error(const std::string& path, const Model& model) {
  try {
    load_checkpoint(path, model);
  } catch (const DataError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected a DataError, got: " << e.what());
  }
  FAIL("expected a DataError, but '" << path << "' loaded");
  return "";
}

std::shared_ptr<spdlog::logger> capture_logger(std::ostringstream& out) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  return std::make_shared<spdlog::logger>("ckpt-test", sink);
}

}  // namespace

TEST_CASE("a checkpoint round-trips floats bit-exactly and keeps its metadata", "[checkpoint]") {
  ScratchDir dir;
  for (const bool adam : {true, false}) {
    const Experiment e =
        adam ? checkpoint_experiment()
             : checkpoint_experiment("", {"optimizer.type=sgd", "optimizer.momentum=0.9"});
    const Model model = Model::build(e.model);
    const CheckpointState saved = filled_state(model, adam);
    const std::string path = dir.file(adam ? "adam.safetensors" : "sgd.safetensors");
    save_checkpoint(path, model, e, saved);
    const CheckpointState loaded = load_checkpoint(path, model);

    CHECK(bit_equal(loaded.params, saved.params));
    CHECK(bit_equal(loaded.state, saved.state));
    CHECK(bit_equal(loaded.moment1, saved.moment1));
    CHECK(bit_equal(loaded.moment2, saved.moment2));
    CHECK(loaded.moment2.empty() == !adam);
    CHECK(loaded.step == 123);
    CHECK(loaded.epoch == 2.75);
    CHECK(loaded.data_source == saved.data_source);
    CHECK(loaded.metadata.at("global_batch") == "24");
    CHECK(loaded.metadata.at(kMetaFormatVersion) == "1");
    CHECK(loaded.metadata.at(kMetaSampler) == "epoch-permutation/v1");
    CHECK(loaded.metadata.at(kMetaSeed) == "7");
    CHECK(loaded.metadata.at(kMetaOptimizer) == (adam ? "adam" : "sgd"));
    CHECK(loaded.metadata.at(kMetaConfig) == to_yaml(e));
    CHECK(loaded.metadata.at(kMetaConfigHash) == math_config_hash(e));
    CHECK(loaded.metadata.at(kMetaMathConfig) == math_config_text(e));
    CHECK_FALSE(loaded.metadata.at(kMetaToolVersion).empty());

    // The file itself: safetensors' framing, tensor names as documented.
    const std::string bytes = read_bytes(path);
    const uint64_t n = header_length(bytes);
    CHECK((8 + n) % 8 == 0);
    const std::string header = bytes.substr(8, n);
    CHECK_THAT(header,
               Contains("\"layers.0.conv2d.weight\":{\"dtype\":\"F32\",\"shape\":[3,1,3,3]"));
    CHECK_THAT(header, Contains("\"layers.1.batch_norm.running_mean\""));
    CHECK_THAT(header, Contains("\"optimizer.m.layers.0.conv2d.weight\""));
    CHECK((header.find("\"optimizer.v.") != std::string::npos) == adam);
    const std::size_t floats = model.param_count() * (adam ? 3 : 2) + model.state_count();
    CHECK(bytes.size() == 8 + n + floats * sizeof(float));
    // Resuming with the same config is allowed.
    CHECK_NOTHROW(check_resume_compatible(loaded, e, path));
  }
}

TEST_CASE("saving checks the buffers against the model and optimizer", "[checkpoint]") {
  ScratchDir dir;
  const Experiment e = checkpoint_experiment();
  const Model model = Model::build(e.model);
  CheckpointState c = filled_state(model, true);
  c.moment2.clear();  // Adam needs its second moment
  CHECK_THROWS_AS(save_checkpoint(dir.file("x.safetensors"), model, e, c), RuntimeError);
  c = filled_state(model, true);
  c.metadata[kMetaStep] = "5";  // the writer owns the required keys
  CHECK_THROWS_AS(save_checkpoint(dir.file("x.safetensors"), model, e, c), RuntimeError);
  CHECK(fs::is_empty(dir.path()));
}

TEST_CASE("checkpoint writes are atomic and leave no temporary file", "[checkpoint]") {
  ScratchDir dir;
  const Experiment e = checkpoint_experiment();
  const Model model = Model::build(e.model);
  const std::string path = dir.file("step.safetensors");
  save_checkpoint(path, model, e, filled_state(model, true, 1));
  save_checkpoint(path, model, e, filled_state(model, true, 2));  // replaces the first
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path()))
    names.push_back(entry.path().filename().string());
  CHECK(names == std::vector<std::string>{"step.safetensors"});
  CHECK(load_checkpoint(path, model).step == 2);

  // What a writer killed before its rename leaves is a hidden temp file, never a final name: the
  // folder ignores it when listing and removes it when opened.
  const std::string run = dir.file("run");
  CheckpointDirectory first(run, 3);
  first.save(model, e, filled_state(model, true, 10));
  const std::string stale = first.dir() + "/.step-000020.safetensors.tmp.99999";
  write_bytes(stale, "half a checkpoint");
  CHECK(first.list().size() == 1);
  std::ostringstream log;
  CheckpointDirectory reopened(run, 3, capture_logger(log));
  CHECK_FALSE(fs::exists(stale));
  CHECK_THAT(log.str(), Contains(".step-000020.safetensors.tmp.99999"));
  CHECK(reopened.list() == std::vector<std::string>{reopened.path_for(10)});
}

TEST_CASE("the checkpoint folder keeps the newest K files", "[checkpoint]") {
  ScratchDir dir;
  const Experiment e = checkpoint_experiment();
  const Model model = Model::build(e.model);
  CheckpointDirectory ckpts(dir.path(), 2);
  CHECK(ckpts.dir() == (fs::path(dir.path()) / "checkpoints").string());
  for (int64_t step : {10, 20, 30, 40}) {
    const std::string written = ckpts.save(model, e, filled_state(model, true, step));
    CHECK(written == ckpts.path_for(step));
  }
  CHECK(fs::path(ckpts.path_for(30)).filename() == "step-000030.safetensors");
  CHECK(ckpts.list() == std::vector<std::string>{ckpts.path_for(30), ckpts.path_for(40)});
  // Steps beyond six digits still sort by number, not by text.
  ckpts.save(model, e, filled_state(model, true, 1234567));
  CHECK(ckpts.list() == std::vector<std::string>{ckpts.path_for(40), ckpts.path_for(1234567)});
}

TEST_CASE("latest_valid returns the newest checkpoint that loads, skipping damaged ones",
          "[checkpoint]") {
  ScratchDir dir;
  const Experiment e = checkpoint_experiment();
  const Model model = Model::build(e.model);
  std::ostringstream log;
  CheckpointDirectory ckpts(dir.path(), 5, capture_logger(log));
  CHECK_FALSE(ckpts.latest_valid(model).has_value());
  for (int64_t step : {10, 20, 30}) ckpts.save(model, e, filled_state(model, true, step));

  const auto newest = ckpts.latest_valid(model);
  REQUIRE(newest.has_value());
  CHECK(newest->path == ckpts.path_for(30));
  CHECK(newest->state.step == 30);
  CHECK(newest->skipped.empty());

  // A crash of the disk, not of our writer: the newest file lost its tail.
  const std::string bytes = read_bytes(ckpts.path_for(30));
  write_bytes(ckpts.path_for(30), bytes.substr(0, bytes.size() - 100));
  const auto found = ckpts.latest_valid(model);
  REQUIRE(found.has_value());
  CHECK(found->path == ckpts.path_for(20));
  CHECK(found->state.step == 20);
  CHECK(bit_equal(found->state.params, filled_state(model, true, 20).params));
  REQUIRE(found->skipped.size() == 1);
  CHECK_THAT(found->skipped[0], Contains("step-000030.safetensors"));
  CHECK_THAT(log.str(), Contains("skipping damaged checkpoint"));
  CHECK_THAT(log.str(), Contains("step-000030.safetensors"));

  // Nothing valid at all.
  write_bytes(ckpts.path_for(20), "");
  write_bytes(ckpts.path_for(10), "not a checkpoint");
  const auto none = ckpts.latest_valid(model);
  CHECK_FALSE(none.has_value());
}

TEST_CASE("a checkpoint holding NaN or infinity is refused, naming the tensor and the first index",
          "[checkpoint]") {
  ScratchDir dir;
  const Experiment e = checkpoint_experiment();
  const Model model = Model::build(e.model);
  const std::string path = dir.file("bad.safetensors");
  const float bad =
      GENERATE(std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
               -std::numeric_limits<float>::infinity());
  // One tensor of each buffer: a parameter, a batch-norm running statistic, both Adam moments.
  const int which = GENERATE(0, 1, 2, 3);
  CheckpointState c = filled_state(model, true);
  const TensorSlot& slot = which == 1 ? model.state().back() : model.params().back();
  std::vector<float>& buffer = which == 0   ? c.params
                               : which == 1 ? c.state
                               : which == 2 ? c.moment1
                                            : c.moment2;
  // The first bad value is the one named, not a later one.
  buffer[slot.offset + 2] = bad;
  buffer[slot.offset + 4] = bad;
  save_checkpoint(path, model, e, c);
  INFO("buffer " << which << ", value " << bad);
  const std::string message = load_error(path, model);
  CHECK_THAT(message, Contains(path) && Contains(slot.name) && Contains("at index 2") &&
                          Contains("finite values only"));
  CHECK_THROWS_AS(load_checkpoint(path, model), DataError);  // exit 2, as any damaged file
}

TEST_CASE(
    "latest_valid passes over a non-finite checkpoint with a warning, and a FIFO without opening "
    "it",
    "[checkpoint]") {
  ScratchDir dir;
  const Experiment e = checkpoint_experiment();
  const Model model = Model::build(e.model);
  std::ostringstream log;
  CheckpointDirectory ckpts(dir.path(), 5, capture_logger(log));
  ckpts.save(model, e, filled_state(model, true, 10));
  CheckpointState diverged = filled_state(model, true, 20);
  diverged.params[5] = std::numeric_limits<float>::quiet_NaN();
  ckpts.save(model, e, diverged);
  // A FIFO under the newest name: only regular files are candidates, so it is never opened.
  REQUIRE(::mkfifo(ckpts.path_for(30).c_str(), 0600) == 0);
  const auto found = ckpts.latest_valid(model);
  REQUIRE(found.has_value());
  CHECK(found->state.step == 10);
  REQUIRE(found->skipped.size() == 1);
  CHECK_THAT(found->skipped[0], Contains("step-000020.safetensors"));
  CHECK_THAT(log.str(), Contains("skipping damaged checkpoint") &&
                            Contains("step-000020.safetensors") && Contains("nan at index 5"));
}

TEST_CASE("each kind of checkpoint damage gives its own DataError naming the file",
          "[checkpoint]") {
  ScratchDir dir;
  const Experiment e = checkpoint_experiment();
  const Model model = Model::build(e.model);
  const std::string good = dir.file("good.safetensors");
  save_checkpoint(good, model, e, filled_state(model, true));
  const std::string bytes = read_bytes(good);
  const uint64_t n = header_length(bytes);
  const std::string path = dir.file("bad.safetensors");
  auto damaged = [&](const std::string& content) {
    write_bytes(path, content);
    return load_error(path, model);
  };
  auto damaged_header = [&](auto edit) {
    write_bytes(path, bytes);
    edit_header(path, edit);
    return load_error(path, model);
  };

  SECTION("missing file") {
    CHECK_THAT(load_error(dir.file("absent.safetensors"), model),
               Contains("checkpoint not found") && Contains("absent.safetensors"));
  }
  SECTION("shorter than the length field") {
    const std::string msg = damaged(bytes.substr(0, 5));
    CHECK_THAT(msg, Contains("bad.safetensors") && Contains("is 5 bytes") &&
                        Contains("shorter than the 8-byte header length"));
  }
  SECTION("header length absurd") {
    const std::string msg = damaged(u64_le(1ull << 40) + bytes.substr(8));
    CHECK_THAT(msg, Contains("bad.safetensors") && Contains("1099511627776") &&
                        Contains("limit of 100000000"));
  }
  SECTION("header length past the end of the file") {
    const std::string msg = damaged(u64_le(bytes.size()) + bytes.substr(8));
    CHECK_THAT(msg, Contains("bad.safetensors") &&
                        Contains(fmt::format("only {} bytes follow", bytes.size() - 8)) &&
                        Contains("truncated?"));
  }
  SECTION("header not valid JSON, with the offset of the problem") {
    std::string copy = bytes;
    const std::size_t at = copy.find(",\"layers.0.conv2d.weight\"");
    REQUIRE(at != std::string::npos);
    copy[at] = ';';
    const std::string msg = damaged(copy);
    CHECK_THAT(msg, Contains("bad.safetensors' header") &&
                        Contains(fmt::format("invalid JSON at byte offset {}", at)) &&
                        Contains("expected ',' or '}'") && Contains("found ';'"));
  }
  SECTION("header not an object") {
    const std::string msg = damaged_header([](std::string& h) { h = "[1, 2]  "; });
    CHECK_THAT(msg, Contains("bad.safetensors") && Contains("is an array, expected a JSON object"));
  }
  SECTION("tensor entry missing dtype") {
    const std::string msg =
        damaged_header([](std::string& h) { replace_once(h, "\"dtype\":\"F32\",", ""); });
    CHECK_THAT(msg, Contains("tensor 'layers.0.conv2d.weight'") && Contains("lacks 'dtype'"));
  }
  SECTION("wrong dtype") {
    const std::string msg = damaged_header(
        [](std::string& h) { replace_once(h, "\"dtype\":\"F32\"", "\"dtype\":\"F16\""); });
    CHECK_THAT(msg, Contains("bad.safetensors") && Contains("tensor 'layers.0.conv2d.weight'") &&
                        Contains("dtype \"F16\"") && Contains("F32 only"));
  }
  SECTION("shape differs from the model's slot") {
    // A checkpoint of a network whose first convolution has 5 filters, read by one with 3.
    std::string yaml = testing::small_network_yaml();
    replace_once(yaml, "filters: 3", "filters: 5");
    const Experiment other = parse_experiment(yaml, "wider.yaml");
    const Model other_model = Model::build(other.model);
    save_checkpoint(path, other_model, other, filled_state(other_model, true));
    const std::string msg = load_error(path, model);
    CHECK_THAT(msg, Contains("bad.safetensors") &&
                        Contains("tensor 'layers.0.conv2d.weight' has shape [5, 1, 3, 3] in the "
                                 "file, but the model's slot 'layers.0.conv2d.weight' is "
                                 "[3, 1, 3, 3]"));
  }
  SECTION("data offsets past the end of the file (truncated data)") {
    const std::string msg = damaged(bytes.substr(0, bytes.size() - 4));
    CHECK_THAT(msg,
               Contains("bad.safetensors") && Contains("run past the end of the file") &&
                   Contains(fmt::format("data section holds {} bytes", bytes.size() - 4 - 8 - n)));
  }
  SECTION("data offsets overlapping") {
    const std::string msg = damaged_header([&](std::string& h) {
      // The bias (12 bytes after the 108-byte kernel) moved onto the kernel's first bytes.
      replace_once(h, "\"data_offsets\":[108,120]", "\"data_offsets\":[0,12]");
    });
    CHECK_THAT(msg, Contains("overlap") && Contains("layers.0.conv2d.weight"));
  }
  SECTION("data offsets out of order: the span does not match the shape") {
    const std::string msg = damaged_header([&](std::string& h) {
      replace_once(h, "\"data_offsets\":[0,108]", "\"data_offsets\":[108,0]");
    });
    CHECK_THAT(msg, Contains("layers.0.conv2d.weight") && Contains("end before they begin"));
  }
  SECTION("data offsets leaving a gap") {
    // Four stray bytes after the first tensor, with every later offset shifted past them: the
    // tensors still end at the end of the file, but no longer tile the data section.
    json::Value header = json::parse(bytes.substr(8, n), "good header");
    for (auto& [name, entry] : header.members) {
      if (name == "__metadata__") continue;
      REQUIRE(entry.members.back().first == "data_offsets");  // the writer puts it last
      auto& offsets = entry.members.back().second.items;
      uint64_t begin = 0, end = 0;
      REQUIRE(offsets.at(0).as_uint64(begin));
      REQUIRE(offsets.at(1).as_uint64(end));
      if (begin >= 108) {
        offsets[0].text = std::to_string(begin + 4);
        offsets[1].text = std::to_string(end + 4);
      }
    }
    std::string text = to_json(header);
    text.append((8 - text.size() % 8) % 8, ' ');
    const std::string data = bytes.substr(8 + n);
    const std::string msg =
        damaged(u64_le(text.size()) + text + data.substr(0, 108) + "gap!" + data.substr(108));
    CHECK_THAT(msg, Contains("bad.safetensors") && Contains("leave a gap of 4 bytes after tensor "
                                                            "'layers.0.conv2d.weight'"));
  }
  SECTION("trailing bytes after the last tensor") {
    const std::string msg = damaged(bytes + "extra!!!");
    CHECK_THAT(msg, Contains("8 unexplained trailing bytes"));
  }
  SECTION("missing tensor the model needs") {
    const Experiment smaller = experiment_without_last_bias();
    const Model small_model = Model::build(smaller.model);
    save_checkpoint(path, small_model, smaller, filled_state(small_model, true));
    const std::string msg = load_error(path, model);
    CHECK_THAT(msg, Contains("bad.safetensors") && Contains("missing 3 tensor(s)") &&
                        Contains("layers.11.dense.bias") &&
                        Contains("optimizer.v.layers.11.dense.bias"));
  }
  SECTION("unknown extra tensor") {
    const Experiment smaller = experiment_without_last_bias();
    const Model small_model = Model::build(smaller.model);
    const std::string msg = load_error(good, small_model);
    CHECK_THAT(msg,
               Contains("good.safetensors") && Contains("unknown tensor 'layers.11.dense.bias'"));
  }
  SECTION("metadata missing required keys") {
    const std::string msg = damaged_header(
        [](std::string& h) { replace_once(h, "\"tool_version\":", "\"tool_versiom\":"); });
    CHECK_THAT(
        msg, Contains("bad.safetensors") && Contains("metadata lacks required keys: tool_version"));
  }
  SECTION("metadata value that is not a string") {
    const std::string msg =
        damaged_header([](std::string& h) { replace_once(h, "\"step\":\"123\"", "\"step\":123"); });
    CHECK_THAT(msg, Contains("metadata 'step'") && Contains("is a number") &&
                        Contains("values are strings"));
  }
  SECTION("metadata edited so the hash no longer matches the math config") {
    const std::string msg = damaged_header(
        [](std::string& h) { replace_once(h, "optimizer.lr=0.01", "optimizer.lr=0.02"); });
    CHECK_THAT(msg, Contains("config_hash") && Contains("edited or damaged"));
  }
}

TEST_CASE("no truncation or header byte flip crashes the reader", "[checkpoint]") {
  ScratchDir dir;
  const Experiment e = checkpoint_experiment();
  const Model model = Model::build(e.model);
  const std::string good = dir.file("good.safetensors");
  save_checkpoint(good, model, e, filled_state(model, true));
  const std::string bytes = read_bytes(good);
  const uint64_t n = header_length(bytes);
  const std::string path = dir.file("fuzz.safetensors");
  // Returns true when the reader rejected the bytes with a DataError; any other exception
  // escapes and fails the test.
  auto rejected = [&](const std::string& content) {
    write_bytes(path, content);
    try {
      load_checkpoint(path, model);
      return false;
    } catch (const DataError&) {
      return true;
    }
  };
  for (std::size_t len = 0; len < bytes.size(); len += 1 + len / 3) {
    INFO("truncated to " << len << " bytes");
    CHECK(rejected(bytes.substr(0, len)));
  }
  // Flip every byte of the length field and the header. Inside free-text metadata (the YAML
  // config, the data source) a flip may still load; in the length field and anywhere in the
  // tensor entries (names, dtype, shapes, offsets, JSON structure, padding) it must be rejected.
  const std::size_t tensors_begin = bytes.find(",\"layers.0.conv2d.weight\":");
  REQUIRE(tensors_begin != std::string::npos);
  int loaded = 0;
  for (std::size_t i = 0; i < 8 + n; ++i) {
    std::string copy = bytes;
    copy[i] = static_cast<char>(copy[i] ^ 0x5a);
    const bool must_reject = i < 8 || i >= tensors_begin;
    const bool was_rejected = rejected(copy);
    if (must_reject) {
      INFO("byte " << i << " flipped");
      CHECK(was_rejected);
    }
    loaded += was_rejected ? 0 : 1;
  }
  INFO(loaded << " of " << 8 + n << " header flips still loaded (free-text metadata)");
  CHECK(loaded < static_cast<int>(n));
}

TEST_CASE("the math-config hash follows the settings that change training, and only those",
          "[checkpoint]") {
  const Experiment base = checkpoint_experiment();
  const std::string hash = math_config_hash(base);
  CHECK(hash.size() == 16);
  CHECK(hash == math_config_hash(checkpoint_experiment()));  // deterministic

  // FNV-1a 64 itself, against the published test vectors.
  CHECK(fnv1a("") == 0xcbf29ce484222325ull);
  CHECK(fnv1a("a") == 0xaf63dc4c8601ec8cull);
  CHECK(fnv1a("foobar") == 0x85944171f73967e8ull);

  SECTION("log_every, output.dir, watchdog, devices and checkpoint settings do not count") {
    const Experiment same = checkpoint_experiment(
        "", {"train.log_every=1", "output.dir=/tmp/elsewhere", "train.watchdog_seconds=9",
             "devices.cpu_workers=2", "checkpoint.keep=7", "name=renamed"});
    CHECK(math_config_hash(same) == hash);
    CHECK(math_config_differences(same, math_config_text(base)).empty());
  }
  SECTION("the learning rate counts, and the difference names it") {
    const Experiment changed = checkpoint_experiment("", {"optimizer.lr=0.02"});
    CHECK(math_config_hash(changed) != hash);
    const auto diff = math_config_differences(changed, math_config_text(base));
    CHECK(diff == std::vector<std::string>{"optimizer.lr: checkpoint 0.01, config 0.02"});
  }
  SECTION("a layer counts") {
    std::string yaml = testing::small_network_yaml();
    replace_once(yaml, "dense: {units: 16", "dense: {units: 20");
    const Experiment changed = parse_experiment(yaml, "changed.yaml");
    CHECK(math_config_hash(changed) != hash);
    const auto diff = math_config_differences(changed, math_config_text(base));
    CHECK(diff == std::vector<std::string>{"model.layers[7].units: checkpoint 16, config 20"});
  }
  SECTION("a removed layer shows as keys the config lacks") {
    std::string yaml = testing::small_network_yaml();
    replace_once(yaml, "    - dropout: {rate: 0.25}\n", "");
    const Experiment changed = parse_experiment(yaml, "changed.yaml");
    const auto diff = math_config_differences(changed, math_config_text(base));
    REQUIRE_FALSE(diff.empty());
    CHECK(diff.front() == "model.layers[10]: checkpoint dropout, config dense");
    CHECK(std::find(diff.begin(), diff.end(),
                    "model.layers[11]: checkpoint dense, config (absent)") != diff.end());
  }
  SECTION("seed, batch and schedule count") {
    for (const char* change :
         {"seed=8", "train.global_batch=32", "schedule.type=step", "train.batch_norm=sync"}) {
      INFO(change);
      CHECK(math_config_hash(checkpoint_experiment("", {change})) != hash);
    }
    // With a cosine schedule the total number of steps shapes the curve; otherwise it does not.
    CHECK(math_config_hash(checkpoint_experiment("", {"train.steps=40"})) == hash);
    CHECK(math_config_hash(checkpoint_experiment("", {"schedule.type=cosine", "train.steps=40"})) !=
          math_config_hash(checkpoint_experiment("", {"schedule.type=cosine"})));
  }
  SECTION("resume refuses a checkpoint of another config, naming the key") {
    ScratchDir dir;
    const Model model = Model::build(base.model);
    const std::string path = dir.file("step.safetensors");
    save_checkpoint(path, model, base, filled_state(model, true));
    const CheckpointState loaded = load_checkpoint(path, model);
    const Experiment changed = checkpoint_experiment("", {"optimizer.lr=0.02"});
    try {
      check_resume_compatible(loaded, changed, path);
      FAIL("resume with a different lr was accepted");
    } catch (const ConfigError& err) {
      CHECK_THAT(
          std::string(err.what()),
          Contains("step.safetensors") && Contains("optimizer.lr: checkpoint 0.01, config 0.02"));
    }
    CHECK_NOTHROW(
        check_resume_compatible(loaded, checkpoint_experiment("", {"train.log_every=2"}), path));
  }
}

TEST_CASE("the selection round-trips in the metadata, and best.safetensors stays out of the roll",
          "[checkpoint][selection]") {
  ScratchDir dir;
  const Experiment e = checkpoint_experiment();
  const Model model = Model::build(e.model);
  CheckpointState saved = filled_state(model, true, 40);
  // Figures no short decimal holds: they must come back exactly.
  saved.selection = {30, 0.1 + 0.2, 1.0 / 3.0, 1, 40};
  const std::string path = dir.file("sel.safetensors");
  save_checkpoint(path, model, e, saved);
  const CheckpointState loaded = load_checkpoint(path, model);
  CHECK(loaded.selection.best_step == 30);
  CHECK(loaded.selection.best_accuracy == 0.1 + 0.2);
  CHECK(loaded.selection.best_loss == 1.0 / 3.0);
  CHECK(loaded.selection.evaluations_since_best == 1);
  CHECK(loaded.selection.last_step == 40);
  CHECK(read_checkpoint_metadata(path).selection.best_step == 30);
  // Without a best nothing is written, and nothing is read back.
  const std::string plain = dir.file("plain.safetensors");
  save_checkpoint(plain, model, e, filled_state(model, true, 40));
  CHECK(load_checkpoint(plain, model).selection.best_step == -1);
  CHECK(load_checkpoint(plain, model).metadata.count(kMetaBestStep) == 0);
  // The writer owns the keys.
  CheckpointState owned = filled_state(model, true, 40);
  owned.metadata[kMetaBestStep] = "3";
  CHECK_THROWS_AS(save_checkpoint(dir.file("x.safetensors"), model, e, owned), RuntimeError);
  // Part of the selection, or a figure that is not a number: damage, naming the file and key.
  edit_header(path,
              [](std::string& h) { replace_once(h, "\"evaluations_since_best\":\"1\",", ""); });
  CHECK_THAT(load_error(path, model), Contains(path) && Contains("lacks evaluations_since_best"));
  save_checkpoint(path, model, e, saved);
  edit_header(path, [](std::string& h) {
    const auto at = h.find("\"best_validation_loss\":\"");
    REQUIRE(at != std::string::npos);
    h.replace(at, std::string("\"best_validation_loss\":\"").size(),
              "\"best_validation_loss\":\"x");
  });
  CHECK_THAT(load_error(path, model),
             Contains(path) && Contains("best_validation_loss") && Contains("finite number"));

  // The best file beside the step files: never listed, never rolled over, never resumed from.
  CheckpointDirectory ckpts(dir.file("run"), 1);
  CHECK(fs::path(ckpts.best_path()).filename() == "best.safetensors");
  CHECK(ckpts.save_best(model, e, saved) == ckpts.best_path());
  for (int64_t step : {10, 20}) ckpts.save(model, e, filled_state(model, true, step));
  CHECK(ckpts.list() == std::vector<std::string>{ckpts.path_for(20)});
  CHECK(fs::exists(ckpts.best_path()));
  CHECK(ckpts.latest_valid(model)->path == ckpts.path_for(20));
  // A best write killed before its rename is cleaned up like a step's.
  const std::string stale = ckpts.dir() + "/.best.safetensors.tmp.99999";
  write_bytes(stale, "half a checkpoint");
  std::ostringstream log;
  CheckpointDirectory reopened(dir.file("run"), 1, capture_logger(log));
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(reopened.best_path()));
}
