// The block plan (model/block_plan.hpp) on the CPU backend: which layers a replica builds and which
// blocks each pass kind runs, for the seed network on each CPU engine. (The CUDA fused engine's
// plans are pinned in tests/gpu/test_launch_counts.cpp, with the kernels they launch.)
#include <algorithm>
#include <string>

#include <catch2/catch.hpp>

#include "backend/backend.hpp"
#include "config/experiment.hpp"
#include "model/block_plan.hpp"
#include "model/model.hpp"
#include "model/replica.hpp"
#include "support/synthetic.hpp"

using namespace mnist;

namespace {

std::string plan_of(const Model& model, const Backend& backend, PassKind pass) {
  const std::vector<LayerUnit> layers = plan_layers(model, backend);
  return describe_blocks(model, layers, plan_blocks(model, layers, backend, pass));
}

}  // namespace

TEST_CASE("the CPU's native engine runs the seed's conv blocks fused, the rest layer by layer",
          "[cpu][model]") {
  const Model model =
      Model::build(parse_experiment(testing::seed_network_yaml(), "seed.yaml").model);
  BackendOptions o;
  o.threads = 1;
  o.engine = Engine::native;
  const auto be = make_cpu_backend(o);
  const std::string layers =
      "conv_block conv_block flatten dense batch_norm relu dropout dense loss";
  // No fused head or tail on the CPU: every pass kind runs the same blocks, the loss last.
  CHECK(plan_of(model, *be, PassKind::train_local_batch_norm) == layers);
  CHECK(plan_of(model, *be, PassKind::train_sync_batch_norm) == layers);
  CHECK(plan_of(model, *be, PassKind::eval) == layers);
  // The replica builds what the plan says: 14 plans, two conv blocks of 4 each.
  Replica r(model, *be, 4);
  CHECK(r.layers().size() == model.layers().size() - 6);
  CHECK(r.block_plan(PassKind::train_local_batch_norm) == layers);
}

TEST_CASE("a block plan groups only a whole conv block, in order", "[cpu][model]") {
  BackendOptions o;
  o.threads = 1;
  o.engine = Engine::native;
  const auto be = make_cpu_backend(o);
  // conv2d -> relu -> max_pool (no batch norm) is no conv block; the one after it is.
  const Model model = Model::build(parse_experiment(R"(
name: t
data: {dataset: custom, dir: unused}
model:
  input: [1, 8, 8]
  classes: 3
  layers:
    - conv2d: {filters: 2, kernel: 3, padding: same, activation: relu}
    - max_pool: {size: 2}
    - conv2d: {filters: 2, kernel: 3, padding: same, batchnorm: true, activation: relu}
    - max_pool: {size: 2}
    - flatten: {}
    - dense: {units: 3}
train: {steps: 1, global_batch: 4}
)",
                                                    "t.yaml")
                                       .model);
  CHECK(plan_of(model, *be, PassKind::train_local_batch_norm) ==
        "conv2d relu max_pool conv_block flatten dense loss");
}

TEST_CASE("the CPU's blas engine fuses nothing", "[cpu][model]") {
  const std::vector<Engine> engines = cpu_engines();
  if (std::find(engines.begin(), engines.end(), Engine::blas) == engines.end()) {
    WARN("no blas engine in this build: its block plan is not checked");
    return;
  }
  const Model model =
      Model::build(parse_experiment(testing::seed_network_yaml(), "seed.yaml").model);
  BackendOptions o;
  o.threads = 1;
  o.engine = Engine::blas;
  const auto be = make_cpu_backend(o);
  CHECK(plan_of(model, *be, PassKind::train_local_batch_norm) ==
        "conv2d batch_norm relu max_pool conv2d batch_norm relu max_pool flatten dense batch_norm "
        "relu dropout dense loss");
}
