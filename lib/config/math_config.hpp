#pragma once
// The math-relevant part of an experiment as canonical text, and its hash: what a checkpoint
// records so that a resume can refuse a config that would not continue the same training.
//
// Checkpoints keep this text and hash in their metadata, so the text of a config must never change
// between versions of the tool: a key added later is written only when it differs from the
// behaviour before it existed, and tests pin the text of shipped configs byte for byte.

#include <string>
#include <vector>

#include "config/experiment.hpp"

namespace mnist {

// The settings that change the math of training, one "key=value" line each, in a fixed order:
//   seed, data.validation_size and data.random_shift (only when > 0)
//   model.input, model.classes, and for each layer i: model.layers[i]=<kind> followed by every
//     option of that kind (conv2d: filters kernel stride padding bias init.*; dense: units bias
//     init.*; max_pool: size stride; batch_norm: decay epsilon center scale; dropout: rate), the
//     options to_yaml writes (the layer-kind rows of layer_kinds.cpp)
//   optimizer.type, optimizer.lr, Adam: beta1 beta2 epsilon (epsilon_style only when tensorflow) |
//     SGD: momentum nesterov, optimizer.weight_decay, optimizer.weight_decay_mode
//   schedule.type, schedule.warmup_steps, step: step_size gamma | cosine: min_lr
//   train.batch_per_device or train.global_batch (whichever the config sets), train.batch_norm,
//     train.scale_lr_with_devices, train.log_after_update (only when true), and with a cosine
//     schedule also train.steps or train.epochs (the schedule's shape depends on the total; with
//     the other schedules extending a run is fine)
// Not included (they do not change the trajectory): name, data paths, devices, log/eval settings,
// watchdog, output, checkpoint. Numbers use fmt's shortest round-trip form; enums their config
// spelling (spellings.hpp).
// Note the device count is not a key: with batch_per_device or scale_lr_with_devices, the caller
// must also compare the resolved global batch / lr (a checkpoint records them in its metadata).
std::string math_config_text(const Experiment& experiment);

// 64-bit FNV-1a of math_config_text, as 16 lowercase hex digits.
std::string math_config_hash(const Experiment& experiment);
// The same hash of a text already made (a checkpoint's recorded math_config).
std::string math_config_hash_of(const std::string& text);

// Differences between `experiment` and a saved math_config_text, one readable line per key:
// "optimizer.lr: checkpoint 0.001, config 0.002" ("(absent)" for a key only one side has).
// Empty when they agree.
std::vector<std::string> math_config_differences(const Experiment& experiment,
                                                 const std::string& saved_text);

}  // namespace mnist
