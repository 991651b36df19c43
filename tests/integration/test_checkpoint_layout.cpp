// Another tool (python3 with struct, json and numpy) reads our checkpoints as we intend: header
// rules, offsets, dtypes, shapes and the first and last value of every tensor.

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "support/checkpoint_fixtures.hpp"
#include "support/idx_writer.hpp"
#include "support/python.hpp"
#include "train/checkpoint.hpp"

using namespace mnist;
using mnist::test::ScratchDir;

namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("another tool reads the layout we intend (python3 struct + json + numpy)",
          "[checkpoint]") {
  const std::string python = mnist::test::find_python("numpy");
  INFO(
      "no python3 with numpy found (tried $MNIST_PYTHON, python3, /usr/bin/python3); "
      "scripts/setup.sh installs python3-numpy");
  REQUIRE(!python.empty());
  ScratchDir dir;
  const Experiment e = mnist::test::checkpoint_experiment();
  const Model model = Model::build(e.model);
  const CheckpointState c = mnist::test::filled_state(model, true);
  const std::string path = dir.file("x.safetensors");
  save_checkpoint(path, model, e, c);
  // Written the way safetensors' reader works: u64 length, JSON, then offsets relative to the
  // data section; prints one line per tensor so the C++ side can compare with the model's slots.
  const std::string script = dir.file("read.py");
  write_bytes(script, R"(import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
assert n <= 100_000_000 and raw[8:9] == b"{", "safetensors header rules"
header = json.loads(raw[8:8 + n].decode("utf-8"))
data = raw[8 + n:]
assert (8 + n) % 8 == 0, "data section not 8-byte aligned"
meta = header.pop("__metadata__")
assert all(isinstance(v, str) for v in meta.values())
print("meta", meta["step"], meta["optimizer"], meta["config_hash"])
end = 0
for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
    b, e = t["data_offsets"]
    assert b == end, (name, b, end)
    end = e
    assert t["dtype"] == "F32"
    a = np.frombuffer(data[b:e], dtype="<f4").reshape(t["shape"])
    print("tensor", name, ",".join(map(str, a.shape)), a.view("<u4").ravel()[0], a.view("<u4").ravel()[-1])
assert end == len(data)
)");
  const std::string out_path = dir.file("out.txt");
  const int rc = std::system(
      fmt::format("'{}' '{}' '{}' > '{}' 2>&1", python, script, path, out_path).c_str());
  const std::string out = read_bytes(out_path);
  INFO(out);
  REQUIRE(rc == 0);

  std::istringstream lines(out);
  std::string kind;
  REQUIRE(lines >> kind);
  CHECK(kind == "meta");
  std::string step, optimizer, hash;
  lines >> step >> optimizer >> hash;
  CHECK(step == "123");
  CHECK(optimizer == "adam");
  CHECK(hash == math_config_hash(e));

  // Expected: every slot of params, state, m, v with its shape and first/last float bits.
  std::map<std::string, std::string> expected;
  auto bits = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  auto add = [&](const std::vector<TensorSlot>& slots, const std::string& prefix,
                 const std::vector<float>& buffer) {
    for (const TensorSlot& s : slots)
      expected[prefix + s.name] =
          fmt::format("{} {} {}", fmt::join(s.shape, ","), bits(buffer[s.offset]),
                      bits(buffer[s.offset + s.count - 1]));
  };
  add(model.params(), "", c.params);
  add(model.state(), "", c.state);
  add(model.params(), "optimizer.m.", c.moment1);
  add(model.params(), "optimizer.v.", c.moment2);
  std::map<std::string, std::string> seen;
  std::string name, shape, first, last;
  while (lines >> kind >> name >> shape >> first >> last) {
    CHECK(kind == "tensor");
    seen[name] = shape + " " + first + " " + last;
  }
  CHECK(seen == expected);
}
