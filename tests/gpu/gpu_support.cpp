#include "gpu/gpu_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>

#include "backend/optimizer_rule.hpp"
#include "build_info.hpp"
#include "config/experiment.hpp"
#include "model/layers.hpp"
#include "model/model.hpp"
#include "model/replica.hpp"

namespace gpu_test {
namespace {

std::unique_ptr<mnist::Backend>& cpu_slot() {
  static std::unique_ptr<mnist::Backend> backend;
  return backend;
}
std::map<std::string, std::unique_ptr<mnist::Backend>>& gpu_slots() {
  static std::map<std::string, std::unique_ptr<mnist::Backend>> backends;
  return backends;
}

}  // namespace

mnist::Backend& cpu() {
  auto& slot = cpu_slot();
  if (!slot) slot = mnist::make_cpu_backend(mnist::BackendOptions{});
  return *slot;
}

mnist::Backend& gpu(const std::string& engine) {
  auto& slot = gpu_slots()[engine];
  if (!slot) {
    mnist::BackendOptions options;
    options.engine = mnist::parse_engine(engine, "gpu tests");
    slot = mnist::make_cuda_backend(0, options);
  }
  return *slot;
}

std::vector<std::string> engines() {
  std::vector<std::string> names;
  for (mnist::Engine e : mnist::cuda_engines()) names.push_back(mnist::to_string(e));
  return names;
}

void release_backends() {
  gpu_slots().clear();
  cpu_slot().reset();
}

std::vector<float> random_floats(std::size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> random_ints(std::size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

mnist::StepScalars step_values_for(const mnist::OptimizerStep& s, int64_t step) {
  return mnist::step_scalars_at(s, step, s.epsilon, /*tensorflow_epsilon=*/false);
}

Twin<float> poisoned(mnist::Backend& gpu_backend, std::size_t n) {
  Twin<float> t{mnist::DeviceBuffer<float>(cpu(), n), mnist::DeviceBuffer<float>(gpu_backend, n)};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (n) {
    cpu().fill(t.cpu.data(), n, nan);
    gpu_backend.fill(t.gpu.data(), n, nan);
  }
  return t;
}

Twin<int32_t> poisoned_ints(mnist::Backend& gpu_backend, std::size_t n) {
  return upload(gpu_backend, std::vector<int32_t>(n, -123456789));
}

void expect_close(mnist::Backend& gpu_backend, const Twin<float>& out, double atol, double rtol,
                  const std::string& what) {
  const std::vector<float> want = download(cpu(), out.cpu);
  const std::vector<float> got = download(gpu_backend, out.gpu);
  struct Bad {
    std::size_t index;
    double excess;
  };
  std::vector<Bad> bad;
  std::size_t cpu_nan = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double c = want[i], g = got[i];
    if (std::isnan(c)) ++cpu_nan;
    const double limit = atol + rtol * std::fabs(c);
    const double diff = std::fabs(g - c);
    if (!(diff <= limit)) bad.push_back({i, std::isnan(diff) ? 1e300 : diff - limit});
  }
  std::ostringstream report;
  report << what << " on " << gpu_backend.name() << ": " << bad.size() << " of " << want.size()
         << " elements break |gpu-cpu| <= " << atol << " + " << rtol << "*|cpu|";
  if (cpu_nan)
    report << " (" << cpu_nan << " NaN in the CPU result: the oracle left them unwritten)";
  std::sort(bad.begin(), bad.end(), [](const Bad& a, const Bad& b) { return a.excess > b.excess; });
  for (std::size_t i = 0; i < std::min<std::size_t>(bad.size(), 5); ++i) {
    const std::size_t k = bad[i].index;
    report << "\n  [" << k << "] gpu " << got[k] << " cpu " << want[k];
  }
  INFO(report.str());
  CHECK(bad.empty());
}

void check_same_bits(mnist::Backend& gpu_backend, const Twin<float>& out, const std::string& what) {
  expect_close(gpu_backend, out, 0.0, 0.0, what);  // reports the worst elements
  CHECK(same_bits(download(cpu(), out.cpu), download(gpu_backend, out.gpu)));  // and signed zeros
}

void expect_equal(mnist::Backend& gpu_backend, const Twin<int32_t>& out, const std::string& what) {
  const std::vector<int32_t> want = download(cpu(), out.cpu);
  const std::vector<int32_t> got = download(gpu_backend, out.gpu);
  std::size_t mismatches = 0, first = want.size();
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (want[i] != got[i]) {
      if (!mismatches) first = i;
      ++mismatches;
    }
  }
  std::ostringstream report;
  report << what << " on " << gpu_backend.name() << ": " << mismatches << " of " << want.size()
         << " differ";
  if (mismatches)
    report << "; first at [" << first << "]: gpu " << got[first] << " cpu " << want[first];
  INFO(report.str());
  CHECK(mismatches == 0);
}

ReplicaRun run_replica(mnist::Backend& be, const std::string& yaml, bool sync) {
  using namespace mnist;
  const Experiment e = parse_experiment(yaml, "network.yaml");
  const Model model = Model::build(e.model);
  const int n = 7;
  const std::vector<float> params = model.initial_params(e.seed);
  const std::vector<float> state = model.initial_state();
  const std::vector<float> images = random_floats(n * model.input().size(), 77, 0.0f, 1.0f);
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[i] = (3 * i) % 10;
  Replica r(model, be, n);
  be.copy_to_device(r.params(), params.data(), params.size() * sizeof(float));
  be.copy_to_device(r.state(), state.data(), state.size() * sizeof(float));
  be.copy_to_device(r.input(), images.data(), images.size() * sizeof(float));
  be.copy_to_device(r.labels(), labels.data(), labels.size() * sizeof(int32_t));
  ReplicaRun out;
  PassContext ctx;
  ctx.n = n;
  ctx.global_n = n;
  ctx.seed = e.seed;
  // Step 3's values, in the backend's memory as the worker keeps them (dropout reads the step).
  mnist::StepScalars values;
  values.step = 3;
  mnist::DeviceBuffer<mnist::StepScalars> on_device(be, 1);
  be.step_scalars_set(on_device.data(), values);
  ctx.step_scalars = on_device.data();
  if (sync) ctx.all_reduce_sum = [&out](float*, std::size_t) { ++out.all_reduces; };
  r.reset_metrics();
  r.forward_train(ctx, 1.0f / n);
  r.backward(ctx);
  out.grads.resize(model.param_count());
  out.metrics.resize(kMetricSlots);
  out.state.resize(model.state_count());
  be.copy_to_host(out.grads.data(), r.grads(), out.grads.size() * sizeof(float));
  be.copy_to_host(out.metrics.data(), r.metrics(), out.metrics.size() * sizeof(float));
  be.copy_to_host(out.state.data(), r.state(), out.state.size() * sizeof(float));
  PassContext eval;
  eval.n = n;
  eval.training = false;
  eval.seed = e.seed;
  const float* logits = r.forward_logits(eval);
  out.logits.resize(static_cast<std::size_t>(n) * model.classes());
  be.copy_to_host(out.logits.data(), logits, out.logits.size() * sizeof(float));
  for (const auto& layer : r.layers()) out.labels.push_back(layer->label());
  return out;
}

void expect_replica_close(const ReplicaRun& want, const ReplicaRun& got) {
  using mnist::kCorrect, mnist::kLossSum, mnist::kSamples;
  REQUIRE(want.metrics.size() == got.metrics.size());
  REQUIRE(want.grads.size() == got.grads.size());
  REQUIRE(want.state.size() == got.state.size());
  REQUIRE(want.logits.size() == got.logits.size());
  INFO("loss sum: cpu " << want.metrics[kLossSum] << ", gpu " << got.metrics[kLossSum]);
  CHECK(std::abs(got.metrics[kLossSum] - want.metrics[kLossSum]) <=
        1e-5 * std::abs(want.metrics[kLossSum]));
  CHECK(got.metrics[kCorrect] == want.metrics[kCorrect]);
  CHECK(got.metrics[kSamples] == want.metrics[kSamples]);
  std::size_t bad = 0, worst = 0;
  double worst_excess = -1;
  for (std::size_t i = 0; i < want.grads.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got.grads[i]) - want.grads[i]);
    const double allowed = 1e-5 + 1e-3 * std::abs(want.grads[i]);
    if (!(diff <= allowed)) ++bad;
    if (!(diff - allowed <= worst_excess)) {
      worst_excess = diff - allowed;
      worst = i;
    }
  }
  INFO("gradient " << worst << " of " << want.grads.size() << ": cpu " << want.grads[worst]
                   << ", gpu " << got.grads[worst] << " (" << bad << " outside the tolerance)");
  CHECK(bad == 0);
  for (std::size_t i = 0; i < want.state.size(); ++i) {
    INFO("running statistic " << i << ": cpu " << want.state[i] << ", gpu " << got.state[i]);
    CHECK(std::abs(got.state[i] - want.state[i]) <= 1e-6 + 1e-5 * std::abs(want.state[i]));
  }
  for (std::size_t i = 0; i < want.logits.size(); ++i) {
    INFO("evaluation logit " << i << ": cpu " << want.logits[i] << ", gpu " << got.logits[i]);
    CHECK(std::abs(got.logits[i] - want.logits[i]) <= 1e-5 + 1e-4 * std::abs(want.logits[i]));
  }
  CHECK(got.all_reduces == want.all_reduces);
}

}  // namespace gpu_test
