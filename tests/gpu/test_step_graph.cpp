// A training step captured once as a CUDA graph and replayed: the per-step values it reads from
// device memory (StepScalars) against their CPU twin, the ops that read them against the same ops
// taking the values by value, and the seed network's whole step replayed over several steps
// against eager launches, bit for bit, with its launches and host waits counted. On the emulated
// build the graph is the emulator's (tools/cuda_emulation); only a GPU runs CUDA's.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/optimizer_rule.hpp"
#include "config/experiment.hpp"
#include "core/error.hpp"
#include "data/sampler.hpp"
#include "gpu/gpu_support.hpp"
#include "model/layers.hpp"
#include "model/model.hpp"
#include "model/replica.hpp"
#include "support/synthetic.hpp"
#include "train/schedule.hpp"
#include "train/worker.hpp"

using namespace gpu_test;
using mnist::Backend;
using mnist::DeviceBuffer;
using mnist::LaunchCounts;
using mnist::StepScalars;

namespace {

StepScalars download_scalars(Backend& be, const DeviceBuffer<StepScalars>& s) {
  StepScalars host;
  be.copy_to_host(&host, s.data(), sizeof host);
  return host;
}

bool same_bits(const StepScalars& a, const StepScalars& b) {
  return a.step == b.step && std::memcmp(&a.lr, &b.lr, sizeof(float)) == 0 &&
         std::memcmp(&a.shrink, &b.shrink, sizeof(float)) == 0 &&
         std::memcmp(&a.c1, &b.c1, sizeof(float)) == 0 &&
         std::memcmp(&a.c2, &b.c2, sizeof(float)) == 0 &&
         std::memcmp(&a.epsilon, &b.epsilon, sizeof(float)) == 0;
}

// The values of step 0 as a host sets them, with the optimizer's own rules.
StepScalars first_step(const mnist::OptimizerStep& o, double epsilon, bool tensorflow_epsilon) {
  return mnist::step_scalars_at(o, 0, epsilon, tensorflow_epsilon);
}

}  // namespace

TEST_CASE("step scalars advance on the device exactly as the host's rule does", "[gpu][graph]") {
  Backend& g = gpu("native");
  Backend& c = cpu();
  for (const bool tensorflow_epsilon : {false, true}) {
    CAPTURE(tensorflow_epsilon);
    mnist::OptimizerStep o;
    o.lr = 0.003f;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.decoupled_wd = 0.01f;
    const double epsilon = 1e-8;
    DeviceBuffer<StepScalars> on_gpu(g, 1), on_cpu(c, 1);
    const StepScalars start = first_step(o, epsilon, tensorflow_epsilon);
    g.step_scalars_set(on_gpu.data(), start);
    c.step_scalars_set(on_cpu.data(), start);
    CHECK(same_bits(download_scalars(g, on_gpu), start));
    for (int64_t step = 1; step <= 40; ++step) {
      CAPTURE(step);
      g.step_scalars_advance(on_gpu.data(), o.beta1, o.beta2, epsilon, tensorflow_epsilon);
      c.step_scalars_advance(on_cpu.data(), o.beta1, o.beta2, epsilon, tensorflow_epsilon);
      const StepScalars got = download_scalars(g, on_gpu), want = download_scalars(c, on_cpu);
      CHECK(same_bits(got, want));
      CHECK(got.step == step);
      // What the eager step computes on the host for the same step.
      CHECK(got.c1 == static_cast<float>(mnist::adam_bias_correction(o.beta1, step + 1)));
      CHECK(got.c2 == static_cast<float>(mnist::adam_bias_correction(o.beta2, step + 1)));
      CHECK(got.lr == start.lr);
      CHECK(got.shrink == start.shrink);
    }
  }
}

TEST_CASE("dropout and Adam reading step scalars match the same ops given the values",
          "[gpu][graph]") {
  Backend& g = gpu("native");
  const mnist::RngKey key = mnist::make_rng_key(7, 0x2003);
  for (const int n : kSizes) {
    CAPTURE(n);
    const int per_sample = 33;
    const std::size_t total = static_cast<std::size_t>(n) * per_sample;
    const auto x = upload(g, random_floats(total, 11 + n, -1.0f, 1.0f));
    StepScalars values;
    values.step = 5 + n;
    DeviceBuffer<StepScalars> on_gpu(g, 1), on_cpu(cpu(), 1);
    g.step_scalars_set(on_gpu.data(), values);
    cpu().step_scalars_set(on_cpu.data(), values);
    // Forward and backward: the GPU from device memory vs the CPU given the step by value.
    for (const bool forward : {true, false}) {
      CAPTURE(forward);
      const auto y = poisoned(g, total);
      if (forward) {
        g.dropout_forward(n, per_sample, 0.4f, key, 0, on_gpu.data(), 3, x.g(), y.g());
        cpu().dropout_forward(n, per_sample, 0.4f, key, static_cast<uint32_t>(values.step), nullptr,
                              3, x.c(), y.c());
      } else {
        g.dropout_backward(n, per_sample, 0.4f, key, 0, on_gpu.data(), 3, x.g(), y.g());
        cpu().dropout_backward(n, per_sample, 0.4f, key, 0, on_cpu.data(), 3, x.c(), y.c());
      }
      expect_close(g, y, 0.0, 0.0, forward ? "dropout forward" : "dropout backward");
    }

    // Adam over n parameters (the first half decayed): by value vs from step scalars, on the GPU
    // (same kernel, so the same bits) and against the CPU twin reading its own scalars.
    mnist::OptimizerStep o;
    o.lr = 0.01f;
    o.l2 = 0.001f;
    o.decoupled_wd = 0.02f;
    o.step = 4;
    o.epsilon = 1e-7f;
    StepScalars at;
    at.step = o.step - 1;
    at.lr = o.lr;
    at.shrink = mnist::decay_rule<float>(o).shrink;
    at.c1 = static_cast<float>(mnist::adam_bias_correction(o.beta1, o.step));
    at.c2 = static_cast<float>(mnist::adam_bias_correction(o.beta2, o.step));
    at.epsilon = o.epsilon;
    g.step_scalars_set(on_gpu.data(), at);
    cpu().step_scalars_set(on_cpu.data(), at);
    const std::vector<float> p0 = random_floats(n, 3 + n, -1.0f, 1.0f);
    const std::vector<float> grads = random_floats(n, 4 + n, -1.0f, 1.0f);
    const std::vector<float> m0 = random_floats(n, 5 + n, -0.1f, 0.1f);
    const std::vector<float> v0 = random_floats(n, 6 + n, 0.0f, 0.1f);
    auto by_value = upload(g, p0), from_device = upload(g, p0);
    auto m_value = upload(g, m0), m_device = upload(g, m0);
    auto v_value = upload(g, v0), v_device = upload(g, v0);
    const auto grad = upload(g, grads);
    const std::size_t decayed = static_cast<std::size_t>(n) / 2;
    g.adam_update(n, decayed, o, nullptr, by_value.g(), grad.g(), m_value.g(), v_value.g());
    g.adam_update(n, decayed, o, on_gpu.data(), from_device.g(), grad.g(), m_device.g(),
                  v_device.g());
    cpu().adam_update(n, decayed, o, on_cpu.data(), from_device.c(), grad.c(), m_device.c(),
                      v_device.c());
    CHECK(same_bits(download(g, by_value.gpu), download(g, from_device.gpu)));
    CHECK(same_bits(download(g, m_value.gpu), download(g, m_device.gpu)));
    CHECK(same_bits(download(g, v_value.gpu), download(g, v_device.gpu)));
    expect_close(g, from_device, 1e-6, 1e-5, "adam params from step scalars");
    expect_close(g, v_device, 1e-7, 1e-5, "adam second moment from step scalars");

    // adam_update_and_advance, the captured step's update in one launch: the same bits as Adam
    // reading the scalars, then the scalars advanced as step_scalars_advance advances them (on
    // the CPU, the chain itself). Twice, so a block counter left behind would show.
    auto fused = upload(g, p0), m_fused = upload(g, m0), v_fused = upload(g, v0);
    DeviceBuffer<StepScalars> advanced(g, 1), chained(g, 1);
    g.step_scalars_set(advanced.data(), at);
    g.step_scalars_set(chained.data(), at);
    cpu().step_scalars_set(on_cpu.data(), at);
    auto chain_params = upload(g, p0), chain_m = upload(g, m0), chain_v = upload(g, v0);
    for (int call = 0; call < 2; ++call) {
      CAPTURE(call);
      const LaunchCounts before = g.counts();
      g.adam_update_and_advance(n, decayed, o, advanced.data(), fused.g(), grad.g(), m_fused.g(),
                                v_fused.g(), 1e-7, true);
      const LaunchCounts c = g.counts() - before;
      CHECK(c.kernels == 1);
      CHECK(c.copies == 0);
      CHECK(c.host_syncs == 0);
      g.adam_update(n, decayed, o, chained.data(), chain_params.g(), grad.g(), chain_m.g(),
                    chain_v.g());
      g.step_scalars_advance(chained.data(), o.beta1, o.beta2, 1e-7, true);
      cpu().adam_update_and_advance(n, decayed, o, on_cpu.data(), fused.c(), grad.c(), m_fused.c(),
                                    v_fused.c(), 1e-7, true);
      CHECK(same_bits(download(g, fused.gpu), download(g, chain_params.gpu)));
      CHECK(same_bits(download(g, m_fused.gpu), download(g, chain_m.gpu)));
      CHECK(same_bits(download(g, v_fused.gpu), download(g, chain_v.gpu)));
      const StepScalars got = download_scalars(g, advanced);
      CHECK(same_bits(got, download_scalars(g, chained)));
      CHECK(same_bits(got, download_scalars(cpu(), on_cpu)));
      CHECK(got.step == at.step + 1 + call);
      expect_close(g, fused, 1e-6, 1e-5, "adam_update_and_advance params");
    }
  }
}

TEST_CASE("gather_batch from a ring of steps' indices takes the slot of the device's step",
          "[gpu][graph]") {
  Backend& g = gpu("native");
  const int pixels = 20, images = 50, ring_steps = 3;
  const std::vector<int32_t> image_bytes = random_ints(std::size_t{images} * pixels, 1, 0, 255);
  const std::vector<int32_t> label_ints = random_ints(images, 2, 0, 9);
  const std::vector<uint8_t> pixel_data(image_bytes.begin(), image_bytes.end());
  const std::vector<uint8_t> label_data(label_ints.begin(), label_ints.end());
  const auto px = upload(g, pixel_data);
  const auto lb = upload(g, label_data);
  for (const int n : kSizes) {
    CAPTURE(n);
    const auto ring = upload(g, random_ints(std::size_t{ring_steps} * n, 3 + n, 0, images - 1));
    for (const int64_t step : {int64_t{0}, int64_t{4}, int64_t{8}}) {
      CAPTURE(step);
      StepScalars at;
      at.step = step;
      DeviceBuffer<StepScalars> on_gpu(g, 1), on_cpu(cpu(), 1);
      g.step_scalars_set(on_gpu.data(), at);
      cpu().step_scalars_set(on_cpu.data(), at);
      const auto x = poisoned(g, std::size_t{static_cast<std::size_t>(n)} * pixels);
      const auto y = poisoned_ints(g, n);
      g.gather_batch(px.g(), lb.g(), pixels, ring.g(), ring_steps, on_gpu.data(), n, x.g(), y.g());
      // The CPU twin given the slot's indices directly.
      const int32_t* slot = ring.c() + (step % ring_steps) * n;
      cpu().gather_batch(px.c(), lb.c(), pixels, slot, n, x.c(), y.c());
      expect_close(g, x, 0.0, 0.0, "gathered images");
      expect_equal(g, y, "gathered labels");
    }
  }
}

namespace {

// The seed network's training step on one GPU: the eager way (per-step values by value, the
// batch's indices at their slot of the ring) or reading and advancing StepScalars, gathering from
// the ring by the device's step (what a capture freezes).
struct SeedStep {
  const mnist::Experiment e =
      mnist::parse_experiment(mnist::testing::seed_network_yaml(), "seed-network.yaml", {});
  const mnist::Model model = mnist::Model::build(e.model);
  static constexpr int kBatch = 8, kRingSteps = 3;
  Backend& be;
  mnist::Replica replica;
  DeviceBuffer<uint8_t> pixels, labels;
  DeviceBuffer<int32_t> ring;
  DeviceBuffer<StepScalars> scalars;
  mnist::OptimizerStep constants;

  explicit SeedStep(Backend& backend)
      : be(backend),
        replica(model, backend, kBatch),
        pixels(backend, 64 * 28 * 28),
        labels(backend, 64),
        ring(backend, kRingSteps * kBatch),
        scalars(backend, 1) {
    const mnist::ImageSet images = mnist::testing::synthetic_split(64, 28, 10, 3);
    be.copy_to_device(pixels.data(), images.pixels.data(), pixels.bytes());
    be.copy_to_device(labels.data(), images.labels.data(), labels.bytes());
    std::vector<int32_t> host(kRingSteps * kBatch);
    for (int i = 0; i < kRingSteps * kBatch; ++i) host[i] = (i * 7) % 64;
    be.copy_to_device(ring.data(), host.data(), ring.bytes());
    const std::vector<float> init = model.initial_params(e.seed);
    be.copy_to_device(replica.params(), init.data(), init.size() * sizeof(float));
    const std::vector<float> state = model.initial_state();
    be.copy_to_device(replica.state(), state.data(), state.size() * sizeof(float));
    constants.lr = 0.01f;
    constants.decoupled_wd = 0.001f;
    be.step_scalars_set(scalars.data(), first_step(constants, constants.epsilon, false));
  }

  // from_scalars: the step number, lr and Adam's values come from `scalars`, advanced at the end.
  void issue(int64_t step, bool from_scalars) {
    if (from_scalars)
      be.gather_batch(pixels.data(), labels.data(), 28 * 28, ring.data(), kRingSteps,
                      scalars.data(), kBatch, replica.input(), replica.labels());
    else
      be.gather_batch(pixels.data(), labels.data(), 28 * 28,
                      ring.data() + (step % kRingSteps) * kBatch, kBatch, replica.input(),
                      replica.labels());
    replica.reset_metrics();
    mnist::PassContext pass;
    pass.n = pass.global_n = kBatch;
    pass.seed = e.seed;
    pass.step = static_cast<uint32_t>(step);
    if (from_scalars) pass.step_scalars = scalars.data();
    replica.forward_train(pass, 1.0f / kBatch);
    replica.backward(pass);
    const std::size_t n = model.param_count(), decayed = model.decayed_count();
    if (from_scalars) {
      be.adam_update(n, decayed, constants, scalars.data(), replica.params(), replica.grads(),
                     replica.moment1(), replica.moment2());
      be.step_scalars_advance(scalars.data(), constants.beta1, constants.beta2, constants.epsilon,
                              false);
    } else {
      mnist::OptimizerStep s = constants;
      s.step = step + 1;
      be.adam_update(n, decayed, s, nullptr, replica.params(), replica.grads(), replica.moment1(),
                     replica.moment2());
    }
  }

  std::vector<float> all_values() {
    std::vector<float> out;
    for (auto [ptr, count] :
         {std::pair<const float*, std::size_t>{replica.params(), model.param_count()},
          {replica.moment1(), model.param_count()},
          {replica.moment2(), model.param_count()},
          {replica.state(), model.state_count()},
          {replica.metrics(), std::size_t{mnist::kMetricSlots}}}) {
      const std::size_t at = out.size();
      out.resize(at + count);
      be.copy_to_host(out.data() + at, ptr, count * sizeof(float));
    }
    return out;
  }
};

}  // namespace

TEST_CASE(
    "the seed network's step replayed as a graph gives the eager step's bits, step after "
    "step, with no host wait between log steps",
    "[gpu][graph]") {
  for (const std::string engine : {"native", "cublas"}) {
    CAPTURE(engine);
    Backend& be = gpu(engine);
    REQUIRE(be.supports_capture());
    SeedStep eager(be), graph(be);
    be.begin_capture();
    graph.issue(0, true);
    const std::unique_ptr<Backend::Captured> step = be.end_capture();
    for (int64_t s = 0; s < 4; ++s) {
      CAPTURE(s);
      LaunchCounts before = be.counts();
      eager.issue(s, false);
      const LaunchCounts e = be.counts() - before;
      before = be.counts();
      be.replay(*step);
      const LaunchCounts c = be.counts() - before;
      // What the eager step issues, plus the kernel that advances the step scalars, in one launch
      // from the host, and no host wait. Natively that is 46 + 1 kernels and the eager step's four
      // device copies (the three batch norms' and the metric reset's memset;
      // tests/gpu/test_launch_counts.cpp).
      CHECK(c.graph_launches == 1);
      CHECK(c.kernels == e.kernels + 1);
      CHECK(c.library_calls == e.library_calls);
      CHECK(c.copies == e.copies);
      CHECK(c.host_syncs == 0);
      CHECK(e.host_syncs == 0);
      if (engine == "native") CHECK((c.kernels == 47 && c.copies == 4));
      CHECK(same_bits(graph.all_values(), eager.all_values()));
    }
    // Several steps between two log steps: only the log step waits, then reads the metrics the
    // last replay left.
    const LaunchCounts before = be.counts();
    for (int64_t s = 4; s < 9; ++s) {
      be.replay(*step);
      eager.issue(s, false);
    }
    CHECK((be.counts() - before).host_syncs == 0);
    be.synchronize();
    CHECK((be.counts() - before).host_syncs == 1);
    std::vector<float> got(3), want(3);
    be.copy_to_host(got.data(), graph.replica.metrics(), sizeof(float) * 3);
    be.copy_to_host(want.data(), eager.replica.metrics(), sizeof(float) * 3);
    CHECK(same_bits(got, want));
    CHECK(got[mnist::kSamples] == SeedStep::kBatch);
  }
}

TEST_CASE("a capture that makes the host wait fails, naming the call", "[gpu][graph]") {
  Backend& be = gpu("native");
  DeviceBuffer<float> x(be, 16);
  be.fill(x.data(), 16, 1.0f);
  SECTION("synchronize") {
    be.begin_capture();
    be.scale(16, 2.0f, x.data());
    CHECK_THROWS(be.synchronize());
    CHECK_THROWS_WITH(be.end_capture(), Catch::Contains("cudaErrorStreamCaptureInvalidated"));
  }
  SECTION("a copy to pageable host memory") {
    std::vector<float> host(16);
    be.begin_capture();
    CHECK_THROWS(be.copy_to_host(host.data(), x.data(), x.bytes()));
    CHECK_THROWS_WITH(be.end_capture(), Catch::Contains("cudaErrorStreamCaptureInvalidated"));
  }
  // The backend works eagerly afterwards, and nothing captured ran.
  std::vector<float> host(16);
  be.copy_to_host(host.data(), x.data(), x.bytes());
  CHECK(host[0] == 1.0f);
  CHECK_FALSE(cpu().supports_capture());
  CHECK_THROWS_AS(cpu().begin_capture(), mnist::RuntimeError);
}

TEST_CASE("a worker's graph step matches its eager step bit for bit and waits only to log",
          "[gpu][graph]") {
  using namespace mnist;
  auto data = std::make_shared<const Dataset>(testing::synthetic_dataset(96, 20));
  // Warm-up then cosine: the learning rate changes every step (the host sets the scalars), and a
  // restore in the middle breaks the step sequence (set again).
  const std::vector<std::string> common{"schedule.type=cosine", "schedule.warmup_steps=3",
                                        "train.steps=12", "train.global_batch=24"};
  // Engines: native (every op its own kernel) and fused (the conv blocks and the head fused).
  BackendOptions options;
  options.engine = GENERATE(Engine::native, Engine::fused);
  CAPTURE(to_string(options.engine));
  auto make_worker = [&](bool graph) {
    std::vector<std::string> overrides = common;
    overrides.push_back(graph ? "train.cuda_graph=true" : "train.cuda_graph=false");
    const Experiment e = parse_experiment(testing::small_network_yaml(), "graph.yaml", overrides);
    const Model model = Model::build(e.model);
    return std::make_unique<Worker>(RunInputs::make(e, model, data, nullptr, 1),
                                    make_cuda_backend(0, options), 0, 0);
  };
  std::unique_ptr<Worker> eager = make_worker(false), graph = make_worker(true);
  const Experiment& e = graph->inputs().experiment;
  CheckpointState middle;
  for (int64_t step = 0; step < 8; ++step) {
    CAPTURE(step);
    if (step == 6) {  // back to the state after step 3, on both
      eager->restore(middle);
      graph->restore(middle);
    }
    const int64_t s = step >= 6 ? step - 2 : step;
    const double lr = learning_rate_at(e.schedule, e.optimizer.lr, s, 12);
    const LaunchCounts before = graph->backend().counts();
    eager->train_step(s, lr, false);
    graph->train_step(s, lr, false);
    const LaunchCounts c = graph->backend().counts() - before;
    CHECK(c.graph_launches == 1);
    CHECK(c.host_syncs == 0);
    const CheckpointState a = eager->snapshot(), b = graph->snapshot();
    CHECK(same_bits(a.params, b.params));
    CHECK(same_bits(a.state, b.state));
    CHECK(same_bits(a.moment1, b.moment1));
    CHECK(same_bits(a.moment2, b.moment2));
    float ma[kMetricSlots], mb[kMetricSlots];
    eager->metrics(ma);
    graph->metrics(mb);
    CHECK(std::memcmp(ma, mb, sizeof ma) == 0);
    if (step == 3) middle = b;
  }
}

namespace {

// A batch source that is not the epoch sampler's: for steps 10 and 11 batches of its own, the
// sampler's otherwise. Injected into both workers, as a test or a benchmark injects its own.
class OddStepsSource : public mnist::BatchSource {
 public:
  OddStepsSource(int dataset_size, uint64_t seed)
      : size_(dataset_size), sampler_(dataset_size, seed) {}
  void batch_indices(int64_t step, int batch, int32_t* out) override {
    sampler_.batch_indices(step, batch, out);
    if (step == 10 || step == 11)
      for (int i = 0; i < batch; ++i)
        out[i] = static_cast<int32_t>((size_ - 1 - i * 3 - step) % size_);
  }

 private:
  int size_;
  mnist::EpochSampler sampler_;
};

}  // namespace

TEST_CASE(
    "the captured step's index ring: one upload per 64 steps, and an injected batch source's "
    "batches train as given",
    "[gpu][graph]") {
  using namespace mnist;
  auto data = std::make_shared<const Dataset>(testing::synthetic_dataset(96, 20));
  auto make_worker = [&](bool graph) {
    const Experiment e =
        parse_experiment(testing::small_network_yaml(), "ring.yaml",
                         {"train.steps=100", "train.global_batch=24",
                          graph ? "train.cuda_graph=true" : "train.cuda_graph=false"});
    const Model model = Model::build(e.model);
    auto source = [seed = e.seed, n = data->train.count] {
      return std::make_unique<OddStepsSource>(n, seed);
    };
    return std::make_unique<Worker>(RunInputs::make(e, model, data, nullptr, 1, source),
                                    make_cuda_backend(0, BackendOptions{}), 0, 0);
  };
  std::unique_ptr<Worker> eager = make_worker(false), graph = make_worker(true);
  CheckpointState after_9;
  // Steps 0-11, then the state after step 9 comes back and steps 10-69 run: the captured step
  // trains on the source's batches (its own ones at steps 10 and 11, both times), as the eager
  // step does.
  const std::vector<int64_t> steps = [] {
    std::vector<int64_t> s;
    for (int64_t i = 0; i < 12; ++i) s.push_back(i);
    for (int64_t i = 10; i < 70; ++i) s.push_back(i);
    return s;
  }();
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const int64_t step = steps[k];
    CAPTURE(k, step);
    if (k == 12) {
      eager->restore(after_9);
      graph->restore(after_9);
    }
    const LaunchCounts e0 = eager->backend().counts(), g0 = graph->backend().counts();
    eager->train_step(step, 1e-3, false);
    graph->train_step(step, 1e-3, false);
    const LaunchCounts ec = eager->backend().counts() - e0, gc = graph->backend().counts() - g0;
    // The eager step sends its slice up every step. The replay sends nothing, except when the
    // ring is filled: steps 0-63 at the first step, 64-127 at step 64 (the restore stays inside
    // the ring).
    const bool upload = k == 0 || step == 64;
    CHECK(gc.copies == ec.copies - (upload ? 0 : 1));
    CHECK(gc.host_syncs == 0);
    const CheckpointState a = eager->snapshot(), b = graph->snapshot();
    REQUIRE(same_bits(a.params, b.params));
    CHECK(same_bits(a.moment2, b.moment2));
    if (k == 9) after_9 = b;
  }
}
