#pragma once
// Fixtures shared by the checkpoint tests: the small test network's experiment, and checkpoint
// contents made of distinct, awkward float values.

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "model/model.hpp"
#include "support/synthetic.hpp"
#include "train/checkpoint.hpp"

namespace mnist::test {

// The small test network (support/synthetic.hpp), with extra YAML and --set overrides.
inline Experiment checkpoint_experiment(const std::string& yaml_extra = "",
                                        const std::vector<std::string>& overrides = {}) {
  return parse_experiment(testing::small_network_yaml(yaml_extra), "ckpt-test.yaml", overrides);
}

// Distinct, awkward values: every float differs from its neighbours, and the set includes signed
// zero, a subnormal, the largest finite float and the smallest normal one, which only a bit-exact
// copy preserves. Never NaN or infinity: a checkpoint holding one is refused as damaged.
inline std::vector<float> values(std::size_t n, float base) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = base + 0.001f * static_cast<float>(i) - 0.37f;
  const float specials[] = {-0.0f, 1e-42f, std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(), std::numeric_limits<float>::min()};
  for (std::size_t i = 0; i < 5 && i < n; ++i) v[(i * 7919) % n] = specials[i];
  return v;
}

inline CheckpointState filled_state(const Model& model, bool adam, int64_t step = 123) {
  CheckpointState c;
  c.step = step;
  c.epoch = 2.75;
  c.data_source = "synthetic (made in memory) \"quoted\"\nsecond line";
  c.params = values(model.param_count(), 1.0f);
  c.state = values(model.state_count(), 50.0f);
  c.moment1 = values(model.param_count(), -3.0f);
  if (adam) c.moment2 = values(model.param_count(), 7.0f);
  c.metadata["global_batch"] = "24";
  return c;
}

}  // namespace mnist::test
