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
#include "backend/cpu/optimizer.hpp"
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

TEST_CASE("an update that advances the step's values moves them on exactly as the host's rule",
          "[gpu][graph]") {
  Backend& g = gpu("native");
  Backend& c = cpu();
  for (const bool adam : {true, false}) {
    for (const bool tensorflow_epsilon : {false, true}) {
      CAPTURE(adam, tensorflow_epsilon);
      mnist::OptimizerStep o;
      o.lr = 0.003f;
      o.beta1 = 0.9f;
      o.beta2 = 0.999f;
      o.decoupled_wd = 0.01f;
      o.configured_epsilon = 1e-8;
      o.tensorflow_epsilon = tensorflow_epsilon;
      const StepScalars start = first_step(o, o.configured_epsilon, tensorflow_epsilon);
      auto values = step_values_on(g, start);
      CHECK(same_bits(download_scalars(g, values.gpu), start));
      const int n = 3;
      auto params = upload(g, random_floats(n, 1, -1.0f, 1.0f));
      auto m = upload(g, std::vector<float>(n, 0.0f)), v = upload(g, std::vector<float>(n, 0.0f));
      const auto grads = upload(g, random_floats(n, 2, -1.0f, 1.0f));
      StepScalars host = start;
      for (int64_t step = 1; step <= 40; ++step) {
        CAPTURE(step);
        if (adam) {
          g.adam_update(n, 1, o, values.g(), true, params.g(), grads.g(), m.g(), v.g());
          c.adam_update(n, 1, o, values.c(), true, params.c(), grads.c(), m.c(), v.c());
        } else {
          g.sgd_update(n, 1, o, values.g(), true, params.g(), grads.g(), m.g());
          c.sgd_update(n, 1, o, values.c(), true, params.c(), grads.c(), m.c());
        }
        host = mnist::step_scalars_next(host, o.beta1, o.beta2, o.configured_epsilon,
                                        tensorflow_epsilon);
        const StepScalars got = download_scalars(g, values.gpu);
        CHECK(same_bits(got, download_scalars(c, values.cpu)));
        CHECK(same_bits(got, host));
        CHECK(got.step == step);
        // What the eager step sets from the host for the same step.
        CHECK(same_bits(got,
                        mnist::step_scalars_at(o, step, o.configured_epsilon, tensorflow_epsilon)));
        CHECK(got.lr == start.lr);
        CHECK(got.shrink == start.shrink);
      }
    }
  }
}

TEST_CASE("dropout and the optimizers read the step's values in backend memory", "[gpu][graph]") {
  Backend& g = gpu("native");
  const mnist::RngKey key = mnist::make_rng_key(7, 0x2003);
  for (const int n : kSizes) {
    CAPTURE(n);
    const int per_sample = 33;
    const std::size_t total = static_cast<std::size_t>(n) * per_sample;
    const auto x = upload(g, random_floats(total, 11 + n, -1.0f, 1.0f));
    StepScalars values;
    values.step = 5 + n;
    const auto at_step = step_values_on(g, values);
    // Forward and backward, each side reading the step where it lives: the same masks.
    for (const bool forward : {true, false}) {
      CAPTURE(forward);
      const auto y = poisoned(g, total);
      if (forward) {
        g.dropout_forward(n, per_sample, 0.4f, key, at_step.g(), 3, x.g(), y.g());
        cpu().dropout_forward(n, per_sample, 0.4f, key, at_step.c(), 3, x.c(), y.c());
      } else {
        g.dropout_backward(n, per_sample, 0.4f, key, at_step.g(), 3, x.g(), y.g());
        cpu().dropout_backward(n, per_sample, 0.4f, key, at_step.c(), 3, x.c(), y.c());
      }
      expect_close(g, y, 0.0, 0.0, forward ? "dropout forward" : "dropout backward");
    }

    // Adam over n parameters (the first half decayed), reading the values the host sets for the
    // step: the CPU's gives the same bits as the CPU kernel given the update by value (what the
    // eager step computed before its values lived in backend memory), and the GPU's is close to
    // it. With advance, the same bits again and the next step's values left behind, in one
    // launch; twice, so a block counter left behind would show.
    mnist::OptimizerStep o;
    o.lr = 0.01f;
    o.l2 = 0.001f;
    o.decoupled_wd = 0.02f;
    o.step = 4;
    o.epsilon = 1e-7f;
    o.configured_epsilon = 1e-7;
    const StepScalars at = step_values_for(o, o.step - 1);
    const std::vector<float> p0 = random_floats(n, 3 + n, -1.0f, 1.0f);
    const std::vector<float> grads = random_floats(n, 4 + n, -1.0f, 1.0f);
    const std::vector<float> m0 = random_floats(n, 5 + n, -0.1f, 0.1f);
    const std::vector<float> v0 = random_floats(n, 6 + n, 0.0f, 0.1f);
    const std::size_t decayed = static_cast<std::size_t>(n) / 2;
    std::vector<float> by_value = p0, m_value = m0, v_value = v0;
    mnist::cpu::adam_update<float>(n, decayed, o, by_value.data(), grads.data(), m_value.data(),
                                   v_value.data(), 1);
    const auto grad = upload(g, grads);
    auto kept = step_values_on(g, at);
    auto params = upload(g, p0), m = upload(g, m0), v = upload(g, v0);
    g.adam_update(n, decayed, o, kept.g(), false, params.g(), grad.g(), m.g(), v.g());
    cpu().adam_update(n, decayed, o, kept.c(), false, params.c(), grad.c(), m.c(), v.c());
    CHECK(same_bits(download(cpu(), params.cpu), by_value));
    CHECK(same_bits(download(cpu(), m.cpu), m_value));
    CHECK(same_bits(download(cpu(), v.cpu), v_value));
    CHECK(same_bits(download_scalars(g, kept.gpu), at));  // no advance: left as they were
    expect_close(g, params, 1e-6, 1e-5, "adam params from the step's values");
    expect_close(g, v, 1e-7, 1e-5, "adam second moment from the step's values");

    auto advanced = step_values_on(g, at);
    auto chained = step_values_on(g, at);
    auto fused = upload(g, p0), m_fused = upload(g, m0), v_fused = upload(g, v0);
    auto chain_params = upload(g, p0), chain_m = upload(g, m0), chain_v = upload(g, v0);
    for (int call = 0; call < 2; ++call) {
      CAPTURE(call);
      const LaunchCounts before = g.counts();
      g.adam_update(n, decayed, o, advanced.g(), true, fused.g(), grad.g(), m_fused.g(),
                    v_fused.g());
      const LaunchCounts c = g.counts() - before;
      CHECK(c.kernels == 1);
      CHECK(c.copies == 0);
      CHECK(c.host_syncs == 0);
      // The same update without advance, then the host setting the next step's values.
      g.adam_update(n, decayed, o, chained.g(), false, chain_params.g(), grad.g(), chain_m.g(),
                    chain_v.g());
      g.step_scalars_set(
          chained.g(), mnist::step_scalars_next(download_scalars(g, chained.gpu), o.beta1, o.beta2,
                                                o.configured_epsilon, false));
      cpu().adam_update(n, decayed, o, advanced.c(), true, fused.c(), grad.c(), m_fused.c(),
                        v_fused.c());
      CHECK(same_bits(download(g, fused.gpu), download(g, chain_params.gpu)));
      CHECK(same_bits(download(g, m_fused.gpu), download(g, chain_m.gpu)));
      CHECK(same_bits(download(g, v_fused.gpu), download(g, chain_v.gpu)));
      const StepScalars got = download_scalars(g, advanced.gpu);
      CHECK(same_bits(got, download_scalars(g, chained.gpu)));
      CHECK(same_bits(got, download_scalars(cpu(), advanced.cpu)));
      CHECK(got.step == at.step + 1 + call);
      expect_close(g, fused, 1e-6, 1e-5, "adam with advance: params");
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
      g.gather_batch({px.g(), lb.g(), pixels, ring.g(), ring_steps, on_gpu.data(), x.g(), y.g()},
                     n);
      // The CPU twin given the slot's indices directly.
      const int32_t* slot = ring.c() + (step % ring_steps) * n;
      cpu().gather_batch({px.c(), lb.c(), pixels, slot, 1, nullptr, x.c(), y.c()}, n);
      expect_close(g, x, 0.0, 0.0, "gathered images");
      expect_equal(g, y, "gathered labels");
    }
  }
}

namespace {

// The seed network's training step on one GPU, the eager way or the way a capture freezes.
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
    constants.configured_epsilon = constants.epsilon;
    be.step_scalars_set(scalars.data(), first_step(constants, constants.configured_epsilon, false));
  }

  // Both ways read the step's values from `scalars`: the eager way sets them from the host and
  // gathers the batch's indices at their slot of the ring; the captured way (`captured`) gathers
  // by the device's step and its update advances them.
  void issue(int64_t step, bool captured) {
    mnist::BatchGather gather;
    gather.images = pixels.data();
    gather.labels = labels.data();
    gather.pixels = 28 * 28;
    gather.x = replica.input();
    gather.y = replica.labels();
    if (captured) {
      gather.ring = ring.data();
      gather.ring_steps = kRingSteps;
      gather.step = scalars.data();
    } else {
      be.step_scalars_set(
          scalars.data(),
          mnist::step_scalars_at(constants, step, constants.configured_epsilon, false));
      gather.ring = ring.data() + (step % kRingSteps) * kBatch;
    }
    be.gather_batch(gather, kBatch);
    replica.reset_metrics();
    mnist::PassContext pass;
    pass.n = pass.global_n = kBatch;
    pass.seed = e.seed;
    pass.step_scalars = scalars.data();
    replica.forward_train(pass, 1.0f / kBatch);
    replica.backward(pass);
    be.adam_update(model.param_count(), model.decayed_count(), constants, scalars.data(), captured,
                   replica.params(), replica.grads(), replica.moment1(), replica.moment2());
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
      // What the eager step issues but the kernel that sets the step's values (the update's last
      // block advances them), in one launch from the host, and no host wait. Natively that is 46
      // kernels and the eager step's four device copies (the three batch norms' and the metric
      // reset's memset; tests/gpu/test_launch_counts.cpp).
      CHECK(c.graph_launches == 1);
      CHECK(c.kernels == e.kernels - 1);
      CHECK(c.library_calls == e.library_calls);
      CHECK(c.copies == e.copies);
      CHECK(c.host_syncs == 0);
      CHECK(e.host_syncs == 0);
      if (engine == "native") CHECK((c.kernels == 46 && c.copies == 4));
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
    eager->train_step({s, lr}, false);
    graph->train_step({s, lr}, false);
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
    eager->train_step({step, 1e-3}, false);
    graph->train_step({step, 1e-3}, false);
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
