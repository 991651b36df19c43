// CUDA vs CPU through the Backend interface: elementwise kernels, data gathering, dropout, loss and
// optimizers. Inputs are identical on both sides; outputs are NaN-poisoned before each call.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "backend/backend.hpp"
#include "gpu/gpu_support.hpp"

using namespace gpu_test;
using mnist::Backend;

TEST_CASE("relu forward and backward match the CPU exactly", "[gpu][relu]") {
  Backend& g = gpu();
  for (int n : kSizes) {
    CAPTURE(n);
    auto x = upload(g, random_floats(n, 1 + n, -1.0f, 1.0f));
    auto dy = upload(g, random_floats(n, 2 + n, -1.0f, 1.0f));
    auto y = poisoned(g, n);
    cpu().relu_forward(n, x.c(), y.c());
    g.relu_forward(n, x.g(), y.g());
    expect_close(g, y, 0.0, 0.0, "relu_forward");  // a selection: bit-exact
    auto dx = poisoned(g, n);
    cpu().relu_backward(n, y.c(), dy.c(), dx.c());
    g.relu_backward(n, y.g(), dy.g(), dx.g());
    expect_close(g, dx, 0.0, 0.0, "relu_backward");
  }
}

TEST_CASE("relu keeps NaN, so a diverged layer still reaches the loss", "[gpu][relu]") {
  Backend& g = gpu();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto x = upload(g, std::vector<float>{nan, -1.0f, 2.0f});
  auto y = poisoned(g, 3);
  g.fill(y.g(), 3, 7.0f);
  g.relu_forward(3, x.g(), y.g());
  const auto got = download(g, y.gpu);
  CHECK(std::isnan(got[0]));
  CHECK(got[1] == 0.0f);
  CHECK(got[2] == 2.0f);
}

TEST_CASE("fill, scale and add match the CPU", "[gpu][elementwise]") {
  Backend& g = gpu();
  for (int n : kSizes) {
    CAPTURE(n);
    auto a = poisoned(g, n);
    cpu().fill(a.c(), n, 0.625f);
    g.fill(a.g(), n, 0.625f);
    expect_close(g, a, 0.0, 0.0, "fill");
    // Zeros take another path (a memset): over NaN poison, and -0.0f keeps its sign bit.
    for (const float zero : {0.0f, -0.0f}) {
      auto z = poisoned(g, n);
      cpu().fill(z.c(), n, zero);
      g.fill(z.g(), n, zero);
      CHECK(same_bits(download(g, z.gpu), download(cpu(), z.cpu)));
    }
    auto x = upload(g, random_floats(n, 3 + n, -2.0f, 2.0f));
    auto y = upload(g, random_floats(n, 4 + n, -2.0f, 2.0f));
    cpu().scale(n, -1.75f, x.c());
    g.scale(n, -1.75f, x.g());
    expect_close(g, x, 0.0, 0.0, "scale");  // one rounding per element on both sides
    cpu().add(n, x.c(), y.c());
    g.add(n, x.g(), y.g());
    expect_close(g, y, 0.0, 0.0, "add");
  }
}

TEST_CASE("gather_batch matches the CPU", "[gpu][gather]") {
  Backend& g = gpu();
  constexpr int kImages = 300, kPixels = 784;
  std::vector<uint8_t> images(kImages * kPixels), labels(kImages);
  const auto raw = random_ints(images.size(), 11, 0, 255);
  for (std::size_t i = 0; i < images.size(); ++i) images[i] = static_cast<uint8_t>(raw[i]);
  const auto raw_labels = random_ints(kImages, 12, 0, 9);
  for (int i = 0; i < kImages; ++i) labels[i] = static_cast<uint8_t>(raw_labels[i]);
  auto d_images = upload(g, images);
  auto d_labels = upload(g, labels);
  for (int n : kSizes) {
    CAPTURE(n);
    auto indices = upload(g, random_ints(n, 13 + n, 0, kImages - 1));
    auto x = poisoned(g, static_cast<std::size_t>(n) * kPixels);
    auto y = poisoned_ints(g, n);
    mnist::BatchGather on_cpu{d_images.c(), d_labels.c(), kPixels, indices.c(), 1,
                              nullptr,      x.c(),        y.c()};
    mnist::BatchGather on_gpu{d_images.g(), d_labels.g(), kPixels, indices.g(), 1,
                              nullptr,      x.g(),        y.g()};
    cpu().gather_batch(on_cpu, n);
    g.gather_batch(on_gpu, n);
    // Dividing by 255 or multiplying by 1/255 may differ in the last bit.
    expect_close(g, x, 0.0, 1.2e-7, "gather_batch images");
    expect_equal(g, y, "gather_batch labels");
  }
}

TEST_CASE("dropout masks are bit-identical to the CPU and to the Philox contract",
          "[gpu][dropout]") {
  Backend& g = gpu();
  const mnist::RngKey key = mnist::make_rng_key(42, 3);
  const uint32_t step = 17, first_sample = 1234;
  mnist::StepScalars values;
  values.step = step;
  const auto at = step_values_on(g, values);
  for (float rate : {0.5f, 0.25f}) {
    for (int n : kSizes) {
      for (int per_sample : {100, 7}) {
        CAPTURE(rate, n, per_sample);
        const std::size_t total = static_cast<std::size_t>(n) * per_sample;
        // Nonzero inputs: a zero output then means "dropped" and nothing else.
        auto x = upload(g, random_floats(total, 21 + n, 0.5f, 1.5f));
        auto y = poisoned(g, total);
        cpu().dropout_forward(n, per_sample, rate, key, at.c(), first_sample, x.c(), y.c());
        g.dropout_forward(n, per_sample, rate, key, at.g(), first_sample, x.g(), y.g());
        expect_close(g, y, 0.0, 1e-6, "dropout_forward");
        const auto got = download(g, y.gpu), want = download(cpu(), y.cpu);
        std::size_t mask_mismatch = 0, contract_mismatch = 0, kept = 0;
        for (std::size_t i = 0; i < total; ++i) {
          const uint32_t row = static_cast<uint32_t>(i / per_sample);
          const uint32_t element = static_cast<uint32_t>(i % per_sample);
          const bool keep =
              mnist::uniform01(
                  mnist::philox4x32(step, first_sample + row, element, 0, key.k0, key.k1).v[0]) >=
              rate;
          mask_mismatch += (got[i] != 0.0f) != (want[i] != 0.0f);
          contract_mismatch += (got[i] != 0.0f) != keep;
          kept += keep;
        }
        CHECK(mask_mismatch == 0);
        CHECK(contract_mismatch == 0);
        if (total >= 1000) {  // the keep rate is what was asked for (binomial, 5 sigma)
          const double p = 1.0 - rate;
          CHECK(std::fabs(kept - p * total) <= 5.0 * std::sqrt(total * p * (1.0 - p)));
        }
        auto dy = upload(g, random_floats(total, 22 + n, -1.0f, 1.0f));
        auto dx = poisoned(g, total);
        cpu().dropout_backward(n, per_sample, rate, key, at.c(), first_sample, dy.c(), dx.c());
        g.dropout_backward(n, per_sample, rate, key, at.g(), first_sample, dy.g(), dx.g());
        expect_close(g, dx, 0.0, 1e-6, "dropout_backward");
      }
    }
  }
}

TEST_CASE("softmax cross-entropy matches the CPU (loss, accuracy, gradient)", "[gpu][loss]") {
  Backend& g = gpu();
  for (int k : {10, 37, 1}) {
    for (int n : kSizes) {
      CAPTURE(k, n);
      std::vector<float> logits =
          random_floats(static_cast<std::size_t>(n) * k, 31 + n, -5.0f, 5.0f);
      if (k >= 6) logits[2] = logits[5] = 9.0f;  // a tie in row 0: the lowest index wins
      auto d_logits = upload(g, logits);
      std::vector<int32_t> host_labels = random_ints(n, 32 + n, 0, k - 1);
      // Row 0's label is the HIGHER tied index: only the lowest-index rule counts it wrong, so a
      // kernel breaking the tie the other way changes the correct count by one and fails.
      if (k >= 6) host_labels[0] = 5;
      auto labels = upload(g, host_labels);
      auto metrics = upload(g, std::vector<float>{1.0f, 2.0f, 3.0f});  // accumulated into
      auto dlogits = poisoned(g, logits.size());
      const float grad_scale = 1.0f / 1024.0f;
      cpu().softmax_cross_entropy(n, k, d_logits.c(), labels.c(), grad_scale, dlogits.c(),
                                  metrics.c());
      g.softmax_cross_entropy(n, k, d_logits.g(), labels.g(), grad_scale, dlogits.g(), metrics.g());
      expect_close(g, dlogits, 1e-9, 1e-5, "softmax_cross_entropy dlogits");
      // Loss: n terms of ~log(k) each, added in a different order (atomics per block on the GPU).
      expect_close(g, metrics, 1e-5 * n, 1e-5, "softmax_cross_entropy metrics");
      const auto m = download(g, metrics.gpu);
      CHECK(m[mnist::kSamples] == 3.0f + n);
      // Without dlogits only the metrics are produced.
      auto metrics_only = upload(g, std::vector<float>{0.0f, 0.0f, 0.0f});
      cpu().softmax_cross_entropy(n, k, d_logits.c(), labels.c(), 1.0f, nullptr, metrics_only.c());
      g.softmax_cross_entropy(n, k, d_logits.g(), labels.g(), 1.0f, nullptr, metrics_only.g());
      expect_close(g, metrics_only, 1e-5 * n, 1e-5, "softmax_cross_entropy metrics only");
    }
  }
}

TEST_CASE("Adam and SGD steps match the CPU over several steps", "[gpu][optimizer]") {
  Backend& g = gpu();
  for (int n : kSizes) {
    const std::size_t n_decay = static_cast<std::size_t>(n) / 2;
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(n, variant);
      mnist::OptimizerStep s;
      s.lr = 0.01f;
      if (variant == 1) s.l2 = 5e-3f;
      if (variant == 2) s.decoupled_wd = 0.1f;
      auto params = upload(g, random_floats(n, 41 + n, -1.0f, 1.0f));
      auto m = upload(g, std::vector<float>(n, 0.0f));
      auto v = upload(g, std::vector<float>(n, 0.0f));
      for (int step = 1; step <= 3; ++step) {
        auto values = step_values_on(g, step_values_for(s, step - 1));
        auto grads = upload(g, random_floats(n, 50 * step + n, -1.0f, 1.0f));
        cpu().adam_update(n, n_decay, s, values.c(), false, params.c(), grads.c(), m.c(), v.c());
        g.adam_update(n, n_decay, s, values.g(), false, params.g(), grads.g(), m.g(), v.g());
      }
      expect_close(g, params, 1e-6, 1e-5, "adam params");
      expect_close(g, m, 1e-7, 1e-5, "adam m");
      expect_close(g, v, 1e-8, 1e-5, "adam v");
    }
    for (int variant = 0; variant < 4; ++variant) {
      CAPTURE(n, variant);
      mnist::OptimizerStep s;
      s.lr = 0.05f;
      s.momentum = variant == 0 ? 0.0f : 0.9f;
      s.nesterov = variant == 2;
      if (variant == 3) {
        s.l2 = 1e-3f;
        s.decoupled_wd = 0.01f;
      }
      auto params = upload(g, random_floats(n, 61 + n, -1.0f, 1.0f));
      auto velocity = upload(g, std::vector<float>(n, 0.0f));
      for (int step = 1; step <= 3; ++step) {
        auto values = step_values_on(g, step_values_for(s, step - 1));
        auto grads = upload(g, random_floats(n, 70 * step + n, -1.0f, 1.0f));
        cpu().sgd_update(n, n_decay, s, values.c(), false, params.c(), grads.c(), velocity.c());
        g.sgd_update(n, n_decay, s, values.g(), false, params.g(), grads.g(), velocity.g());
      }
      expect_close(g, params, 1e-6, 1e-5, "sgd params");
      expect_close(g, velocity, 1e-6, 1e-5, "sgd velocity");
    }
  }
}
