// The configs shipped in configs/: every file loads, and the seed's config describes the seed's
// network (layer sequence, slim defaults, 61,878 trainable parameters).

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "config/experiment.hpp"

using namespace mnist;

namespace {

std::vector<std::string> kinds(const Experiment& e) {
  std::vector<std::string> out;
  for (const auto& l : e.model.layers) out.push_back(to_string(l.kind));
  return out;
}

std::vector<std::filesystem::path> shipped_configs() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(MNIST_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() == ".yaml" || entry.path().extension() == ".yml") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("the seed config expands the slim shorthand into the seed's layer sequence", "[config]") {
  Experiment e = load_experiment(std::string(MNIST_SOURCE_DIR) + "/configs/seed_single_gpu.yaml");
  REQUIRE(kinds(e) == std::vector<std::string>{"conv2d", "batch_norm", "relu", "max_pool", "conv2d",
                                               "batch_norm", "relu", "max_pool", "flatten", "dense",
                                               "batch_norm", "relu", "dropout", "dense"});
  const auto& L = e.model.layers;
  for (size_t i : {0u, 4u, 9u}) {
    INFO("layer " << i);
    CHECK_FALSE(L[i].bias);  // slim drops the bias under a normalizer
    CHECK(L[i].init.kind == InitKind::truncated_normal);
    CHECK(L[i].init.mean == 0.0f);
    CHECK(L[i].init.stddev == 0.01f);
  }
  for (size_t i : {1u, 5u, 10u}) {
    INFO("layer " << i);
    CHECK(L[i].decay == 0.9f);
    CHECK(L[i].epsilon == 0.001f);
    CHECK(L[i].center);
    CHECK_FALSE(L[i].scale);
  }
  CHECK(L[0].filters == 6);
  CHECK(L[0].kernel == 5);
  CHECK(L[4].filters == 12);
  CHECK(L[9].units == 100);
  CHECK(L[12].rate == 0.5f);
  CHECK(L[13].units == 10);
  CHECK(L[13].bias);
  CHECK(L[1].yaml_path == "model.layers[0].conv2d.batchnorm");
  CHECK(L[2].yaml_path == "model.layers[0].conv2d.activation");
  CHECK(L[0].yaml_path == "model.layers[0]");
  CHECK(e.train.steps == 200);
  CHECK(e.train.batch_per_device == 1024);
  CHECK(e.train.log_every == 10);
  CHECK(e.devices.gpus_mode == GpuSelection::list);
  CHECK(e.devices.gpu_list == std::vector<int>{0});
  CHECK(e.optimizer.kind == OptimizerKind::adam);
  CHECK(e.optimizer.lr == 0.001);
  CHECK(e.output.dir == "runs/seed_single_gpu");

  // Trainable parameters of the resolved list, walked here with the seed's shapes (SAME conv,
  // pool 2): 61,878 is the seed network's count, so the config describes that network.
  int c = e.model.input_c, h = e.model.input_h, w = e.model.input_w;
  long params = 0, params_with_scale = 0;
  for (const auto& l : L) {
    long p = 0;
    switch (l.kind) {
      case LayerKind::conv2d:
        p = long(l.kernel) * l.kernel * c * l.filters + (l.bias ? l.filters : 0);
        c = l.filters;
        break;
      case LayerKind::max_pool:
        h /= l.stride;
        w /= l.stride;
        break;
      case LayerKind::flatten:
        c = c * h * w;
        h = w = 1;
        break;
      case LayerKind::dense:
        p = long(c) * l.units + (l.bias ? l.units : 0);
        c = l.units;
        break;
      case LayerKind::batch_norm:
        p = (l.center ? c : 0) + (l.scale ? c : 0);
        params_with_scale += c;  // gamma, had scale been on
        break;
      default:
        break;
    }
    params += p;
  }
  CHECK(params == 61878);
  CHECK(params + params_with_scale == 61996);
}

TEST_CASE("every file in configs/ loads", "[config]") {
  auto files = shipped_configs();
  REQUIRE(files.size() >= 5);
  for (const auto& path : files) {
    INFO(path.string());
    Experiment e;
    REQUIRE_NOTHROW(e = load_experiment(path.string()));
    CHECK(e.source_path == path.string());
    CHECK_FALSE(e.model.layers.empty());
    CHECK(e.model.layers.back().kind == LayerKind::dense);
    CHECK(e.model.layers.back().units == e.model.classes);
    // The run directory defaults to runs/<name>; a config's name is the file's stem so runs of
    // different configs never share a directory.
    CHECK(e.name == path.stem().string());
    // The resolved text reads back to the same experiment: emitting it again changes nothing.
    const std::string text = to_yaml(e);
    INFO(text);
    CHECK(to_yaml(parse_experiment(text, "resolved.yaml")) == text);
  }
}
