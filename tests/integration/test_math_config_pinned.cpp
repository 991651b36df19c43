// The math-config text and hash of the shipped configs, pinned: checkpoints record them, and a
// resume compares the recorded hash with the config's, so a change to how the text is made (a key
// renamed, a number formatted differently, a new key written when it is at its old behaviour)
// would refuse every checkpoint written before it. The expected values were computed by the code
// that wrote those checkpoints; a change here is a change of the checkpoint format.

#include <catch2/catch.hpp>

#include <string>

#include "config/experiment.hpp"
#include "config/math_config.hpp"

using namespace mnist;

namespace {

Experiment shipped(const std::string& name) {
  return load_experiment(std::string(MNIST_SOURCE_DIR) + "/configs/" + name);
}

}  // namespace

TEST_CASE("the math-config text of configs/seed_blog.yaml is the one its checkpoints hold",
          "[config][checkpoint]") {
  const char* expected = R"(seed=42
data.validation_size=5000
model.input=1,28,28
model.classes=10
model.layers[0]=conv2d
model.layers[0].filters=6
model.layers[0].kernel=5
model.layers[0].stride=1
model.layers[0].padding=same
model.layers[0].bias=false
model.layers[0].init.type=truncated_normal
model.layers[0].init.mean=0
model.layers[0].init.stddev=0.01
model.layers[1]=batch_norm
model.layers[1].decay=0.9
model.layers[1].epsilon=0.001
model.layers[1].center=true
model.layers[1].scale=false
model.layers[2]=relu
model.layers[3]=max_pool
model.layers[3].size=2
model.layers[3].stride=2
model.layers[4]=conv2d
model.layers[4].filters=12
model.layers[4].kernel=5
model.layers[4].stride=1
model.layers[4].padding=same
model.layers[4].bias=false
model.layers[4].init.type=truncated_normal
model.layers[4].init.mean=0
model.layers[4].init.stddev=0.01
model.layers[5]=batch_norm
model.layers[5].decay=0.9
model.layers[5].epsilon=0.001
model.layers[5].center=true
model.layers[5].scale=false
model.layers[6]=relu
model.layers[7]=max_pool
model.layers[7].size=2
model.layers[7].stride=2
model.layers[8]=flatten
model.layers[9]=dense
model.layers[9].units=100
model.layers[9].bias=false
model.layers[9].init.type=truncated_normal
model.layers[9].init.mean=0
model.layers[9].init.stddev=0.01
model.layers[10]=batch_norm
model.layers[10].decay=0.9
model.layers[10].epsilon=0.001
model.layers[10].center=true
model.layers[10].scale=false
model.layers[11]=relu
model.layers[12]=dropout
model.layers[12].rate=0.5
model.layers[13]=dense
model.layers[13].units=10
model.layers[13].bias=true
model.layers[13].init.type=truncated_normal
model.layers[13].init.mean=0
model.layers[13].init.stddev=0.01
optimizer.type=adam
optimizer.lr=0.01
optimizer.beta1=0.9
optimizer.beta2=0.999
optimizer.epsilon=1e-08
optimizer.epsilon_style=tensorflow
optimizer.weight_decay=0
optimizer.weight_decay_mode=l2
schedule.type=constant
schedule.warmup_steps=0
train.batch_per_device=1024
train.batch_norm=local
train.scale_lr_with_devices=false
train.log_after_update=true
)";
  CHECK(math_config_text(shipped("seed_blog.yaml")) == expected);
  CHECK(math_config_hash(shipped("seed_blog.yaml")) == "a70b940be612fe57");
}

TEST_CASE("every shipped config keeps the math-config hash its checkpoints hold",
          "[config][checkpoint]") {
  const std::pair<const char*, const char*> pinned[] = {
      {"cpu_quickstart.yaml", "41b40c9e44966885"},  {"fashion_mnist.yaml", "06e11f975b010005"},
      {"seed_best.yaml", "d1a59c9d360752e6"},       {"seed_blog.yaml", "a70b940be612fe57"},
      {"seed_layers.yaml", "92b6362a332d8855"},     {"seed_long.yaml", "93f4bbf01f391c3d"},
      {"seed_single_gpu.yaml", "06e11f975b010005"}, {"two_gpu.yaml", "fe9633a9fb4705bf"},
  };
  for (const auto& [file, hash] : pinned) {
    CAPTURE(file);
    CHECK(math_config_hash(shipped(file)) == hash);
  }
}
