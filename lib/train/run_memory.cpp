#include "train/run_memory.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "train/device_plan.hpp"

namespace mnist {

namespace {

constexpr double kMiB = 1048576.0;

// a * b saturated at UINT64_MAX: terms only need to compare with the memory there is.
uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}
uint64_t add_sat(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

}  // namespace

std::vector<MemoryTerm> replica_memory(const Model& model, int64_t batch,
                                       const std::string& batch_key) {
  uint64_t widest = model.input().size();
  std::string widest_name = "model.input";
  for (const LayerPlan& p : model.layers()) {
    if (p.out.size() <= widest) continue;
    widest = p.out.size();
    widest_name = fmt::format("the output of {}", p.spec.yaml_path.empty()
                                                      ? fmt::format("model.layers[{}]", p.index)
                                                      : p.spec.yaml_path);
  }
  // Every per-sample count is at most kMaxTensorValues (Model::build), so this product fits.
  const uint64_t batch_values = mul_sat(static_cast<uint64_t>(batch), widest);
  if (batch_values > static_cast<uint64_t>(kMaxTensorValues))
    MNIST_THROW(ConfigError,
                "{}: a batch of {} samples makes a tensor of {} values ({} per sample: {}), more "
                "than the {} the kernels index; use at most {} samples per replica",
                batch_key, batch, batch_values, widest, widest_name, kMaxTensorValues,
                static_cast<uint64_t>(kMaxTensorValues) / widest);
  const uint64_t per_sample = model.input().size() + 2 * widest + model.classes();
  MemoryTerm batch_term{batch_key, mul_sat(mul_sat(static_cast<uint64_t>(batch), per_sample), 4)};
  // The largest parameter tensor names its layer; the other layers' parameters come with it.
  const TensorSlot* largest = nullptr;
  for (const TensorSlot& slot : model.params())
    if (largest == nullptr || slot.count > largest->count) largest = &slot;
  std::string layer_key = "model.layers";
  for (const LayerPlan& p : model.layers())
    if (largest != nullptr && p.weight >= 0 && &model.params()[p.weight] == largest)
      layer_key =
          (p.spec.yaml_path.empty() ? fmt::format("model.layers[{}]", p.index) : p.spec.yaml_path) +
          "." + to_string(p.spec.kind);
  // Parameters, gradients, two optimizer moments.
  MemoryTerm params_term{layer_key, static_cast<uint64_t>(model.param_count()) * 4 * 4};
  return {batch_term, params_term};
}

void check_host_memory(const std::vector<MemoryTerm>& terms, int64_t copies,
                       uint64_t available_bytes, const std::string& what) {
  uint64_t total = 0;
  const MemoryTerm* largest = nullptr;
  for (const MemoryTerm& t : terms) {
    total = add_sat(total, mul_sat(t.bytes, static_cast<uint64_t>(copies)));
    if (largest == nullptr || t.bytes > largest->bytes) largest = &t;
  }
  if (total <= available_bytes || largest == nullptr) return;
  MNIST_THROW(ConfigError,
              "{}: {} needs at least {:.0f} MiB of host memory; {:.0f} MiB are available ({:.0f} "
              "MiB{} of it set by {}); make it smaller",
              largest->key, what, total / kMiB, available_bytes / kMiB,
              mul_sat(largest->bytes, static_cast<uint64_t>(copies)) / kMiB,
              copies > 1 ? fmt::format(" over {} replicas", copies) : std::string(), largest->key);
}

void check_training_memory(const Experiment& experiment, const Model& model,
                           const DevicePlan& devices, int processes, uint64_t dataset_bytes) {
  const TrainConfig& t = experiment.train;
  const int64_t replicas = static_cast<int64_t>(devices.workers()) * std::max(processes, 1);
  const int64_t global =
      t.global_batch > 0 ? t.global_batch : static_cast<int64_t>(t.batch_per_device) * replicas;
  const int64_t slice = (global + replicas - 1) / replicas;
  std::string key = t.global_batch > 0 ? "train.global_batch" : "train.batch_per_device";
  int64_t batch = slice;
  if (t.eval_batch > slice) {
    key = "train.eval_batch";
    batch = t.eval_batch;
  }
  std::vector<MemoryTerm> terms = replica_memory(model, batch, key);
  if (devices.kind != DeviceKind::cpu) return;  // a GPU's memory is checked as it is allocated
  // Each CPU worker uploads the dataset to its "device", which is host memory.
  terms.push_back({"data.dir", dataset_bytes});
  check_host_memory(terms, devices.workers(), available_host_bytes(),
                    fmt::format("training with {}", devices.describe_workers()));
}

}  // namespace mnist
