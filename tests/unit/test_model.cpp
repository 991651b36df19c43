// The model plan: shapes, parameter counts of the seed network, layout and initialisation.
#include <catch2/catch.hpp>

#include "config/experiment.hpp"
#include "core/error.hpp"
#include "model/model.hpp"
#include "support/synthetic.hpp"

using namespace mnist;

namespace {
Experiment seed_config(const std::vector<std::string>& overrides = {}) {
  return parse_experiment(testing::seed_network_yaml(), "seed-network.yaml", overrides);
}
}  // namespace

TEST_CASE("the seed network has the documented parameter counts and shapes", "[model]") {
  const Model m = Model::build(seed_config().model);
  CHECK(m.param_count() == 61878);
  // conv 6x1x5x5 + conv 12x6x5x5 + dense 100x588 + dense 10x100 are the decayed kernels.
  CHECK(m.decayed_count() == 150 + 1800 + 58800 + 1000);
  CHECK(m.state_count() == 2 * (6 + 12 + 100));
  const auto& layers = m.layers();
  REQUIRE(layers.size() >= 12);
  CHECK(layers[0].out.str() == "6x28x28");
  bool saw_flatten = false;
  for (const LayerPlan& p : layers)
    if (p.spec.kind == LayerKind::flatten) {
      CHECK(p.out.c == 588);
      saw_flatten = true;
    }
  CHECK(saw_flatten);
  CHECK(layers.back().out.c == 10);

  // With a learned batch-norm scale (gamma) the count grows by one value per normalised channel.
  std::vector<std::string> with_scale = {"model.batch_norm.scale=true"};
  const Model scaled = Model::build(seed_config(with_scale).model);
  CHECK(scaled.param_count() == 61996);
  CHECK(scaled.summary().find("61996") != std::string::npos);
}

TEST_CASE("parameter layout is contiguous with decayed kernels first", "[model]") {
  const Model m = Model::build(seed_config().model);
  std::size_t covered = 0;
  for (const TensorSlot& s : m.params()) {
    if (s.decayed)
      CHECK(s.offset + s.count <= m.decayed_count());
    else
      CHECK(s.offset >= m.decayed_count());
    covered += s.count;
  }
  CHECK(covered == m.param_count());
}

TEST_CASE("initial parameters are a pure function of the seed", "[model]") {
  const Model m = Model::build(seed_config().model);
  const auto a = m.initial_params(42), b = m.initial_params(42), c = m.initial_params(43);
  CHECK(a == b);
  CHECK(a != c);
  // Truncated normal(0, 0.01): nothing beyond two standard deviations, and a sane spread.
  const TensorSlot& w = m.params()[m.layers()[0].weight];
  double sum2 = 0;
  for (std::size_t i = 0; i < w.count; ++i) {
    CHECK(std::abs(a[w.offset + i]) <= 0.02f + 1e-7f);
    sum2 += a[w.offset + i] * a[w.offset + i];
  }
  const double rms = std::sqrt(sum2 / w.count);
  CHECK(rms > 0.006);
  CHECK(rms < 0.01);
  // Biases start at zero, running variances at one.
  const auto state = m.initial_state();
  const LayerPlan* bn = nullptr;
  for (const LayerPlan& p : m.layers())
    if (p.running_var >= 0) bn = &p;
  REQUIRE(bn);
  CHECK(state[m.state()[bn->running_var].offset] == 1.0f);
  CHECK(state[m.state()[bn->running_mean].offset] == 0.0f);
}

TEST_CASE("a layer that does not fit names its index, type and path", "[model]") {
  SECTION("dense without flatten") {
    const Experiment e = parse_experiment(R"(
model:
  layers:
    - conv2d: {filters: 4, kernel: 3}
    - dense: {units: 10}
train: {steps: 1, batch_per_device: 2}
)",
                                          "inline.yaml");
    REQUIRE_THROWS_WITH(Model::build(e.model), Catch::Contains("layer 1 (dense)") &&
                                                   Catch::Contains("model.layers[1]") &&
                                                   Catch::Contains("flatten"));
  }
  SECTION("kernel larger than the input with valid padding") {
    const Experiment e = parse_experiment(R"(
model:
  input: [1, 4, 4]
  layers:
    - conv2d: {filters: 4, kernel: 5, padding: valid}
    - flatten: {}
    - dense: {units: 10}
train: {steps: 1, batch_per_device: 2}
)",
                                          "inline.yaml");
    REQUIRE_THROWS_WITH(Model::build(e.model),
                        Catch::Contains("layer 0 (conv2d)") && Catch::Contains("leaves no output"));
  }
  SECTION("last layer width differs from the class count") {
    const Experiment e = parse_experiment(R"(
model:
  layers:
    - flatten: {}
    - dense: {units: 7}
train: {steps: 1, batch_per_device: 2}
)",
                                          "inline.yaml");
    REQUIRE_THROWS_AS(Model::build(e.model), ConfigError);
    REQUIRE_THROWS_WITH(Model::build(e.model), Catch::Contains("model.classes is 10"));
  }
}
