// Fused ops against their CPU twins, the chains of CPU ops they stand for (backend.cpp):
// dense_softmax_cross_entropy (the network's head, one kernel on CUDA: dense_head.cu) on the seed
// network's head (100 -> 10) and awkward sizes, with poisoned outputs, accumulated metrics and
// gradients that must repeat bit for bit.
//
// Head tolerances, |gpu - cpu| <= atol + rtol * |cpu|: x in [-1, 1], weights and biases in [-0.5,
// 0.5] and grad_scale 1, so dlogits are at most 1 and the logits agree to ~1e-6 * in; dx (k terms):
// atol 1e-5, rtol 1e-4; dweight and dbias (n terms): atol 2e-6 * n + 1e-5, rtol 1e-4; the metrics
// (n rows, added in another order): atol 1e-5 * n, rtol 1e-5, as the loss kernel's own test.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gpu/gpu_support.hpp"

using namespace gpu_test;
using mnist::Backend;

namespace {

struct HeadCase {
  int in, k;
  std::vector<int> batches;
};

}  // namespace

TEST_CASE("dense_softmax_cross_entropy matches the chain of CPU ops", "[gpu][fused][dense_head]") {
  Backend& g = gpu("fused");
  const std::vector<HeadCase> cases{
      // The seed network's head, on kSizes and on the grids of the cross-block sum: 1000 rows
      // take 125 blocks (7 groups of 16 and a short one of 13), 1024 take 128 (8 groups), 4096
      // the most (256 blocks, 16 groups, 2 rows a warp) and 2049 a grid whose warps do not all
      // take the same number of rows.
      {100, 10, {1, 7, 33, 255, 257, 1000, 1024, 2049, 4096}},
      {37, 3, {1, 7, 33, 257}},    // odd sizes: lanes without inputs
      {128, 16, {1, 7, 33, 257}},  // the largest the fused kernel takes
      {64, 11, {7, 33}},           // one class past the kernel compiled for 10: the wider one
      {1, 1, {1, 7}},              // one input, one class
      {200, 10, {7, 33}},          // too wide for the fused kernel: the chain on the GPU
  };
  for (const HeadCase& hc : cases) {
    for (int n : hc.batches) {
      INFO("in " << hc.in << ", k " << hc.k << ", n " << n);
      const int in = hc.in, k = hc.k;
      auto x = upload(g, random_floats(static_cast<std::size_t>(n) * in, 900 + n, -1.0f, 1.0f));
      auto w = upload(g, random_floats(static_cast<std::size_t>(k) * in, 901 + n, -0.5f, 0.5f));
      auto b = upload(g, random_floats(k, 902 + n, -0.5f, 0.5f));
      auto labels = upload(g, random_ints(n, 903 + n, 0, k - 1));
      mnist::DeviceBuffer<float> ws_cpu(
          cpu(), std::max<std::size_t>(
                     1, cpu().fused().workspace_floats(mnist::FusedShape::dense_head(n, in, k))));
      mnist::DeviceBuffer<float> ws_gpu(
          g, std::max<std::size_t>(
                 1, g.fused().workspace_floats(mnist::FusedShape::dense_head(n, in, k))));
      const double atol_sum = 2e-6 * n + 1e-5;

      for (bool with_bias : {true, false}) {
        for (bool with_dx : {true, false}) {
          INFO((with_bias ? "with bias" : "no bias") << ", " << (with_dx ? "dx" : "no dx"));
          auto metrics = upload(g, std::vector<float>{1.0f, 2.0f, 3.0f});  // accumulated into
          auto dx = poisoned(g, static_cast<std::size_t>(n) * in);
          auto dw = poisoned(g, static_cast<std::size_t>(k) * in);
          auto db = poisoned(g, k);
          cpu().fused().dense_softmax_cross_entropy(
              n, in, k, x.c(), w.c(), with_bias ? b.c() : nullptr, labels.c(), 1.0f,
              with_dx ? dx.c() : nullptr, dw.c(), with_bias ? db.c() : nullptr, metrics.c(),
              ws_cpu.data());
          g.fused().dense_softmax_cross_entropy(n, in, k, x.g(), w.g(), with_bias ? b.g() : nullptr,
                                                labels.g(), 1.0f, with_dx ? dx.g() : nullptr,
                                                dw.g(), with_bias ? db.g() : nullptr, metrics.g(),
                                                ws_gpu.data());
          expect_close(g, metrics, 1e-5 * n, 1e-5, "metrics");
          CHECK(download(g, metrics.gpu)[mnist::kSamples] == 3.0f + n);
          expect_close(g, dw, atol_sum, 1e-4, "dweight");
          if (with_bias) expect_close(g, db, atol_sum, 1e-4, "dbias");
          if (with_dx) {
            expect_close(g, dx, 1e-5, 1e-4, "dx");
          } else {
            // Not asked for: dx stays as it was (poisoned) on both sides.
            const std::vector<float> untouched = download(g, dx.gpu);
            CHECK(std::all_of(untouched.begin(), untouched.end(),
                              [](float v) { return std::isnan(v); }));
          }
        }
      }

      // Bit-repeatable gradients.
      auto metrics = upload(g, std::vector<float>{0.0f, 0.0f, 0.0f});
      auto dw1 = poisoned(g, static_cast<std::size_t>(k) * in);
      auto dw2 = poisoned(g, static_cast<std::size_t>(k) * in);
      auto db1 = poisoned(g, k);
      auto db2 = poisoned(g, k);
      for (auto* out : {&dw1, &dw2}) {
        auto* bias_out = out == &dw1 ? &db1 : &db2;
        g.fused().dense_softmax_cross_entropy(n, in, k, x.g(), w.g(), b.g(), labels.g(),
                                              1.0f / 1024, nullptr, out->g(), bias_out->g(),
                                              metrics.g(), ws_gpu.data());
      }
      const auto w1 = download(g, dw1.gpu), w2 = download(g, dw2.gpu);
      const auto b1 = download(g, db1.gpu), b2 = download(g, db2.gpu);
      CHECK(same_bits(w1, w2));
      CHECK(same_bits(b1, b2));
    }
  }
}
