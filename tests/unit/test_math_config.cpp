// The canonical math-config text (config/math_config.hpp), pinned for configs that reach every
// branch of it: checkpoints hold this text and its hash, so it must come out byte for byte as the
// code that wrote them made it. The expected texts were computed by that code.

#include <catch2/catch.hpp>

#include <string>

#include "config/experiment.hpp"
#include "config/math_config.hpp"

using namespace mnist;

namespace {

// Every layer kind, explicit padding, per-layer initializers, SGD with Nesterov, a cosine schedule
// over epochs, and the keys added after the first checkpoints (validation_size, random_shift,
// log_after_update) set.
const char* kEveryOption = R"(name: rich
seed: 7
data: {dataset: mnist, validation_size: 100, random_shift: 1}
model:
  input: [1, 28, 28]
  classes: 10
  init: he_normal
  layers:
    - conv2d: {filters: 4, kernel: 3, stride: 2, padding: 1, bias: false, init: {type: truncated_normal, mean: 0.5, stddev: 0.25}}
    - conv2d: {filters: 4, kernel: 3, padding: valid, init: glorot_uniform, batchnorm: {decay: 0.99, epsilon: 0.0001, center: false, scale: true}, activation: relu}
    - max_pool: {size: 3, stride: 1}
    - batch_norm: {}
    - relu: {}
    - flatten: {}
    - dense: {units: 20, init: zeros}
    - dropout: {rate: 0.25}
    - dense: {units: 10}
train: {epochs: 1.5, global_batch: 64, batch_norm: sync, scale_lr_with_devices: true, log_after_update: true}
optimizer: {type: sgd, lr: 0.1, momentum: 0.9, nesterov: true, weight_decay: 0.0005, weight_decay_mode: decoupled}
schedule: {type: cosine, warmup_steps: 5, min_lr: 0.001}
)";

// Adam with TensorFlow's epsilon, a step schedule, and device settings (which the text leaves out).
const char* kAdamStep = R"(name: rich2
model:
  layers:
    - conv2d: {filters: 6, kernel: 5}
    - flatten: {}
    - dense: {units: 10}
train: {steps: 10, batch_per_device: 8}
optimizer: {type: adam, lr: 0.002, beta1: 0.8, epsilon_style: tensorflow}
schedule: {type: step, step_size: 100, gamma: 0.5}
devices: {backend: cuda, gpus: "auto:2", engine: cudnn}
)";

}  // namespace

TEST_CASE("the math-config text of a config using every option is pinned", "[config][checkpoint]") {
  const Experiment e = parse_experiment(kEveryOption, "every_option.yaml");
  const char* expected = R"(seed=7
data.validation_size=100
data.random_shift=1
model.input=1,28,28
model.classes=10
model.layers[0]=conv2d
model.layers[0].filters=4
model.layers[0].kernel=3
model.layers[0].stride=2
model.layers[0].padding=1
model.layers[0].bias=false
model.layers[0].init.type=truncated_normal
model.layers[0].init.mean=0.5
model.layers[0].init.stddev=0.25
model.layers[1]=conv2d
model.layers[1].filters=4
model.layers[1].kernel=3
model.layers[1].stride=1
model.layers[1].padding=valid
model.layers[1].bias=false
model.layers[1].init.type=glorot_uniform
model.layers[2]=batch_norm
model.layers[2].decay=0.99
model.layers[2].epsilon=0.0001
model.layers[2].center=false
model.layers[2].scale=true
model.layers[3]=relu
model.layers[4]=max_pool
model.layers[4].size=3
model.layers[4].stride=1
model.layers[5]=batch_norm
model.layers[5].decay=0.9
model.layers[5].epsilon=0.001
model.layers[5].center=true
model.layers[5].scale=false
model.layers[6]=relu
model.layers[7]=flatten
model.layers[8]=dense
model.layers[8].units=20
model.layers[8].bias=true
model.layers[8].init.type=zeros
model.layers[9]=dropout
model.layers[9].rate=0.25
model.layers[10]=dense
model.layers[10].units=10
model.layers[10].bias=true
model.layers[10].init.type=he_normal
optimizer.type=sgd
optimizer.lr=0.1
optimizer.momentum=0.9
optimizer.nesterov=true
optimizer.weight_decay=0.0005
optimizer.weight_decay_mode=decoupled
schedule.type=cosine
schedule.warmup_steps=5
schedule.min_lr=0.001
train.global_batch=64
train.batch_norm=sync
train.scale_lr_with_devices=true
train.log_after_update=true
train.epochs=1.5
)";
  CHECK(math_config_text(e) == expected);
  CHECK(math_config_hash(e) == "b0b5d337082fbf1b");
}

TEST_CASE("the math-config text of an Adam config with a step schedule is pinned",
          "[config][checkpoint]") {
  const Experiment e = parse_experiment(kAdamStep, "adam_step.yaml");
  const char* expected = R"(seed=42
model.input=1,28,28
model.classes=10
model.layers[0]=conv2d
model.layers[0].filters=6
model.layers[0].kernel=5
model.layers[0].stride=1
model.layers[0].padding=same
model.layers[0].bias=true
model.layers[0].init.type=truncated_normal
model.layers[0].init.mean=0
model.layers[0].init.stddev=0.01
model.layers[1]=flatten
model.layers[2]=dense
model.layers[2].units=10
model.layers[2].bias=true
model.layers[2].init.type=truncated_normal
model.layers[2].init.mean=0
model.layers[2].init.stddev=0.01
optimizer.type=adam
optimizer.lr=0.002
optimizer.beta1=0.8
optimizer.beta2=0.999
optimizer.epsilon=1e-08
optimizer.epsilon_style=tensorflow
optimizer.weight_decay=0
optimizer.weight_decay_mode=l2
schedule.type=step
schedule.warmup_steps=0
schedule.step_size=100
schedule.gamma=0.5
train.batch_per_device=8
train.batch_norm=local
train.scale_lr_with_devices=false
)";
  CHECK(math_config_text(e) == expected);
  CHECK(math_config_hash(e) == "73f74f773d9c1930");
}
