#pragma once
// Small learnable datasets made in memory, so engine tests need no files: class d draws a bright
// square at a position that depends on d, plus noise from a counter-based generator
// (deterministic).

#include <cstdint>
#include <string>

#include "config/experiment.hpp"
#include "core/rng.hpp"
#include "data/dataset.hpp"

namespace mnist::testing {

inline ImageSet synthetic_split(int count, int side, int classes, uint64_t seed) {
  ImageSet s;
  s.count = count;
  s.rows = s.cols = side;
  s.pixels.resize(static_cast<std::size_t>(count) * side * side);
  s.labels.resize(count);
  const RngKey key = make_rng_key(seed, 77);
  for (int i = 0; i < count; ++i) {
    const int label = i % classes;
    s.labels[i] = static_cast<uint8_t>(label);
    const int cy = 2 + (label / 4) * (side / 4), cx = 2 + (label % 4) * (side / 4);
    for (int y = 0; y < side; ++y)
      for (int x = 0; x < side; ++x) {
        const Philox4x32 r = philox4x32(i, y * side + x, 0, 0, key.k0, key.k1);
        int v = static_cast<int>(r.v[0] % 60);
        if (y >= cy && y < cy + side / 5 && x >= cx && x < cx + side / 5) v += 180;
        s.pixels[static_cast<std::size_t>(i) * side * side + y * side + x] =
            static_cast<uint8_t>(v);
      }
  }
  return s;
}

inline Dataset synthetic_dataset(int train, int test, int side = 12, int classes = 10) {
  Dataset d;
  d.name = "synthetic";
  d.train = synthetic_split(train, side, classes, 1);
  d.test = synthetic_split(test, side, classes, 2);
  return d;
}

// A small network for 12x12 synthetic images exercising every layer kind.
inline std::string small_network_yaml(const std::string& extra = "") {
  return R"(
name: engine-test
seed: 7
data: {dataset: custom, dir: unused}
model:
  input: [1, 12, 12]
  init: {type: truncated_normal, stddev: 0.1}
  layers:
    - conv2d: {filters: 3, kernel: 3, padding: same, batchnorm: true, activation: relu}
    - max_pool: {size: 2}
    - conv2d: {filters: 4, kernel: 3, padding: valid, bias: true, activation: relu}
    - flatten: {}
    - dense: {units: 16, batchnorm: true, activation: relu}
    - dropout: {rate: 0.25}
    - dense: {units: 10}
devices: {backend: cpu, cpu_workers: 1, threads: 1}
train: {steps: 20, global_batch: 24, log_every: 5, eval_batch: 50}
optimizer: {type: adam, lr: 0.01}
output: {dir: /tmp/mnist-train-test-run}
)" + extra;
}

// The seed's network (configs/seed_single_gpu.yaml's model section) as text, for unit tests that
// need its shapes without reading the shipped configs.
inline std::string seed_network_yaml() {
  return R"(
name: seed-network
seed: 42
data: {dataset: custom, dir: unused}
model:
  input: [1, 28, 28]
  classes: 10
  init: {type: truncated_normal, mean: 0.0, stddev: 0.01}
  batch_norm: {decay: 0.9, epsilon: 0.001, center: true, scale: false}
  layers:
    - conv2d: {filters: 6, kernel: 5, padding: same, batchnorm: true, activation: relu}
    - max_pool: {size: 2}
    - conv2d: {filters: 12, kernel: 5, padding: same, batchnorm: true, activation: relu}
    - max_pool: {size: 2}
    - flatten: {}
    - dense: {units: 100, batchnorm: true, activation: relu}
    - dropout: {rate: 0.5}
    - dense: {units: 10}
devices: {backend: cpu}
train: {steps: 200, batch_per_device: 1024}
optimizer: {type: adam, lr: 0.001}
)";
}

}  // namespace mnist::testing
