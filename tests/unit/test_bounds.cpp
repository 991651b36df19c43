// Hostile and careless inputs meet a bound before they meet an overflow: every size key swept to
// its extremes, and derived counts beyond what a run represents.

#include <catch2/catch.hpp>

#include <limits>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "core/error.hpp"
#include "model/model.hpp"
#include "train/worker.hpp"

using Catch::Matchers::Contains;
using mnist::ConfigError;

namespace {

// A small network with one layer of each kind that has integer keys.
const char* kNetwork = R"(
name: bounds
data: {dataset: custom, dir: unused}
model:
  input: [1, 28, 28]
  layers:
    - conv2d: {filters: 4, kernel: 3, stride: 1, padding: 1}
    - max_pool: {size: 2, stride: 2}
    - flatten: {}
    - dense: {units: 10}
devices: {backend: cpu}
train: {steps: 5, batch_per_device: 32}
)";

// What a run does with a config before touching data or a device: parse and build the model.
// Returns "" when all of it passes, else the ConfigError's message; any other exception fails the
// test.
std::string plan_error(const std::vector<std::string>& overrides) {
  try {
    const mnist::Experiment e = mnist::parse_experiment(kNetwork, "bounds.yaml", overrides);
    const mnist::Model model = mnist::Model::build(e.model);
    (void)model.summary();
    return "";
  } catch (const ConfigError& err) {
    return err.what();
  }
}

// The extremes an integer key meets: signs, zero, the size-key cap and one past it, the int32
// and int64 limits and one past each, a 20-digit number, and a float.
const std::vector<std::string> kExtremes = {"-9223372036854775808",
                                            "-2147483648",
                                            "-1",
                                            "0",
                                            "1",
                                            "2",
                                            "1048576",
                                            "1048577",
                                            "2147483647",
                                            "2147483648",
                                            "4294967296",
                                            "9223372036854775807",
                                            "9223372036854775808",
                                            "99999999999999999999",
                                            "1e19",
                                            "3.5"};

}  // namespace

TEST_CASE(
    "every integer key of every layer kind, swept to its extremes, passes or is refused by "
    "name, never overflows",
    "[bounds][config][model]") {
  // Each layer kind's integer keys (layer_kinds.cpp) and the model's own.
  const std::vector<std::string> keys = {"model.layers[0].conv2d.filters",
                                         "model.layers[0].conv2d.kernel",
                                         "model.layers[0].conv2d.stride",
                                         "model.layers[0].conv2d.padding",
                                         "model.layers[1].max_pool.size",
                                         "model.layers[1].max_pool.stride",
                                         "model.layers[3].dense.units",
                                         "model.input[0]",
                                         "model.input[1]",
                                         "model.input[2]",
                                         "model.classes"};
  for (const std::string& key : keys) {
    for (const std::string& value : kExtremes) {
      const std::string message = plan_error({key + "=" + value});
      INFO(key << "=" << value << ": " << message);
      // Negative, fractional, beyond a 32-bit int, or (for a size key) past the size-key cap:
      // refused.
      const bool huge = value.size() >= 10 || (value == "1048577" && key.rfind("model.", 0) == 0);
      if (huge || value[0] == '-' || value == "3.5") {
        CHECK_FALSE(message.empty());
      }
      if (message.empty()) continue;
      // Named by its config path: the key itself for a value the reader refused, else the layer
      // whose shape no longer fits (this one or a later one: a stride shrinks what follows).
      CHECK_THAT(message, Contains(key) || Contains("model.layers[") || Contains("model.input"));
    }
  }
  // The examples the tool once crashed on: refused by the key, with the limit.
  CHECK_THAT(plan_error({"model.layers[0].conv2d.padding=2147483647"}),
             Contains("model.layers[0].conv2d.padding") && Contains("1048576"));
  // Within the cap, but an output too tall for any tensor: the layer, the rule and the keys.
  CHECK_THAT(plan_error({"model.layers[0].conv2d.padding=1048576"}),
             Contains("model.layers[0]") && Contains("output height") &&
                 Contains("model.layers[0].conv2d.padding"));
  CHECK_THAT(
      plan_error({"model.layers[0].conv2d.filters=1048576", "model.layers[0].conv2d.kernel=1048576",
                  "model.layers[0].conv2d.padding=same"}),
      Contains("weight tensor") && Contains("kernel"));
  CHECK_THAT(
      plan_error({"model.layers[3].dense.units=1048576", "model.layers[0].conv2d.filters=4096"}),
      Contains("model.layers[3]") && Contains("weight tensor"));
}

TEST_CASE("derived counts beyond what a run represents are refused by key", "[bounds][train]") {
  mnist::TrainConfig t;
  t.batch_per_device = 100;
  for (const double epochs : {1e308, 1e19, 1e12}) {
    t.epochs = epochs;
    INFO("epochs " << epochs);
    CHECK_THROWS_WITH(mnist::plan_batches(t, 1, 60000),
                      Contains("train.epochs") && Contains("steps") && Contains("2147483648"));
  }
  t.epochs = 1;
  CHECK(mnist::plan_batches(t, 1, 60000).steps == 600);
  t.epochs = 1e-9;  // a sliver of an epoch is still one step, never zero
  CHECK(mnist::plan_batches(t, 1, 60000).steps == 1);
  t.epochs = 0;
  t.steps = int64_t{1} << 40;
  CHECK_THROWS_WITH(mnist::plan_batches(t, 1, 60000), Contains("train.steps"));
  // batch_per_device times the replicas must fit the global batch's int.
  t.steps = 10;
  t.batch_per_device = std::numeric_limits<int>::max();
  CHECK_THROWS_WITH(mnist::plan_batches(t, 2, 60000),
                    Contains("train.batch_per_device") && Contains("4294967294"));
}
