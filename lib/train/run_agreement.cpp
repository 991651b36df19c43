#include "train/run_agreement.hpp"

#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/fnv1a.hpp"

namespace mnist {

namespace {

uint64_t hash_images(const ImageSet& set, uint64_t hash) {
  const int dims[3] = {set.count, set.rows, set.cols};
  hash = fnv1a(dims, sizeof(dims), hash);
  hash = fnv1a(set.pixels.data(), set.pixels.size(), hash);
  return fnv1a(set.labels.data(), set.labels.size(), hash);
}

// The ranks whose value differs from rank 0's, e.g. "rank 1 (node2), rank 3 (node4)".
std::string ranks_differing(const std::vector<std::string>& values,
                            const std::vector<std::string>& hosts) {
  std::string out;
  for (std::size_t r = 1; r < values.size(); ++r)
    if (values[r] != values[0])
      out += fmt::format("{}rank {} ({})", out.empty() ? "" : ", ", r, hosts[r]);
  return out;
}

}  // namespace

void check_same_run(ProcessGroup& group, const Experiment& experiment, const Dataset& data) {
  Experiment shared = experiment;
  shared.devices = DevicesConfig{};
  shared.output = OutputConfig{};
  shared.data = DataConfig{};
  shared.source_path.clear();
  const std::string yaml = to_yaml(shared);
  const std::string config_hash = fmt::format("{:016x}", fnv1a(yaml));
  const std::string data_hash = fmt::format(
      "{} train / {} validation / {} test images, hash {:016x}", data.train.count,
      data.validation.count, data.test.count,
      hash_images(data.test,
                  hash_images(data.validation, hash_images(data.train, kFnv1aOffsetBasis))));
  const std::vector<std::string> hosts = group.all_gather_strings(group.host());
  const std::vector<std::string> configs = group.all_gather_strings(config_hash);
  const std::vector<std::string> datas = group.all_gather_strings(data_hash);
  const std::string config_differs = ranks_differing(configs, hosts);
  if (!config_differs.empty())
    MNIST_THROW(ConfigError,
                "{} resolved a different experiment than rank 0 ({}): every rank must train the "
                "same model with the same seed, batch and optimizer (only devices, output and data "
                "paths may differ per node); start every rank with the same config file and --set "
                "overrides",
                config_differs, hosts[0]);
  const std::string data_differs = ranks_differing(datas, hosts);
  if (!data_differs.empty()) {
    std::string all;
    for (std::size_t r = 0; r < datas.size(); ++r)
      all += fmt::format("\n  rank {} ({}): {}", r, hosts[r], datas[r]);
    MNIST_THROW(DataError,
                "{} loaded different data than rank 0: every rank's replica must see the same "
                "images at the same indices; copy the same files to every node:{}",
                data_differs, all);
  }
}

}  // namespace mnist
