// The direct convolution kernels (lib/backend/cuda/direct_conv.cu) against the CPU's im2col + GEMM
// (lib/backend/cpu/conv2d.cpp) through the Backend, on every compiled shape: the seed networks'
// geometries and awkward ones (odd heights and widths, padding 0..k-1, one more padding row at the
// bottom, outputs wider than one tile, batches 1, 7, 33, 255, 257). Each case first checks that
// the CUDA backend reports "direct" for it, so these comparisons exercise the direct kernels and
// not the implicit GEMM they replace; forward_stats's batch-norm sums, and conv2d_backward (both
// directions in one grid) against the two separate calls, are checked too. Outputs
// are NaN-poisoned first, the workspace is exactly the
// size the backend asked for with a guard zone after it, and the weight gradient must repeat bit
// for bit.
//
// Tolerances, |gpu - cpu| <= atol + rtol * |cpu| with rtol 1e-5: for a sum of `terms` products of
// values in [-1, 1], atol = 1e-6 * terms + 1e-6 (float rounding in either order of summation):
// terms = c*kh*kw + 1 (forward with bias), k*kh*kw (backward data), n*out_h*out_w (weights).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "gpu/gpu_support.hpp"

using namespace gpu_test;
using mnist::Backend;

namespace {

double sum_atol(double terms) {
  return 1e-6 * std::max(1.0, terms) + 1e-6;
}

struct DirectCase {
  const char* label;
  int c, k, kh, kw;
  int h, w, pad_top, pad_left, pad_bottom, pad_right;
  std::vector<int> batches;
};

mnist::Conv2dGeom geom(const DirectCase& dc, int n) {
  mnist::Conv2dGeom g;
  g.n = n;
  g.c = dc.c;
  g.h = dc.h;
  g.w = dc.w;
  g.k = dc.k;
  g.kh = dc.kh;
  g.kw = dc.kw;
  g.pad_h = dc.pad_top;
  g.pad_w = dc.pad_left;
  // Stride 1: the bottom/right padding only shows in the output size (Conv2dGeom's convention).
  g.out_h = dc.h + dc.pad_top + dc.pad_bottom - dc.kh + 1;
  g.out_w = dc.w + dc.pad_left + dc.pad_right - dc.kw + 1;
  return g;
}

const std::vector<int> kAllBatches{1, 7, 33, 255, 257};

const std::vector<DirectCase>& direct_cases() {
  static const std::vector<DirectCase> cases{
      // The seed network (configs/seed_single_gpu.yaml): SAME 5x5, 1->6 on 28x28, 6->12 on 14x14.
      {"seed conv1", 1, 6, 5, 5, 28, 28, 2, 2, 2, 2, kAllBatches},
      {"seed conv2", 6, 12, 5, 5, 14, 14, 2, 2, 2, 2, kAllBatches},
      // configs/seed_layers.yaml: 1->12 5x5 on 28x28, 12->24 3x3 on 14x14.
      {"layers conv1", 1, 12, 5, 5, 28, 28, 2, 2, 2, 2, {1, 7, 33}},
      {"layers conv2", 12, 24, 3, 3, 14, 14, 1, 1, 1, 1, {1, 7, 33}},
      // Odd sizes, every padding from 0 to k-1, asymmetric padding, several tiles per sample.
      {"1->6 9x13 valid", 1, 6, 5, 5, 9, 13, 0, 0, 0, 0, {1, 7, 33}},
      {"1->6 11x7 pad 1", 1, 6, 5, 5, 11, 7, 1, 1, 1, 1, {1, 33}},
      {"1->6 7x6 pad 3x4", 1, 6, 5, 5, 7, 6, 3, 4, 3, 4, {1, 7}},
      {"1->6 10x10 one more pad at bottom/right", 1, 6, 5, 5, 10, 10, 1, 1, 2, 2, {7}},
      {"1->6 3x70 (two column tiles)", 1, 6, 5, 5, 3, 70, 2, 2, 2, 2, {1, 7}},
      {"6->12 5x9 valid (one output row)", 6, 12, 5, 5, 5, 9, 0, 0, 0, 0, {1, 7, 33}},
      {"6->12 13x3 pad 4", 6, 12, 5, 5, 13, 3, 4, 4, 4, 4, {1, 7}},
      {"6->12 30x20 pad 1 (several row tiles)", 6, 12, 5, 5, 30, 20, 1, 1, 1, 1, {1, 7}},
      {"6->12 9x9 pad 3, one more at bottom/right", 6, 12, 5, 5, 9, 9, 3, 3, 4, 4, {7}},
      {"1->12 6x5 pad 3", 1, 12, 5, 5, 6, 5, 3, 3, 3, 3, {1, 7}},
      {"12->24 9x11 valid", 12, 24, 3, 3, 9, 11, 0, 0, 0, 0, {1, 7}},
      {"12->24 17x65 pad 2 (row and column tiles)", 12, 24, 3, 3, 17, 65, 2, 2, 2, 2, {1}},
  };
  return cases;
}

std::vector<float> host_copy(Backend& b, const float* data, std::size_t n) {
  std::vector<float> host(n);
  if (n) b.copy_to_host(host.data(), data, n * sizeof(float));
  return host;
}

}  // namespace

TEST_CASE("direct convolution kernels match the CPU on awkward sizes",
          "[gpu][conv2d][direct_conv]") {
  Backend& g = gpu("native");
  constexpr std::size_t kGuard = 4096;  // floats after the workspace that must stay untouched
  const float sentinel = -12345.5f;
  for (const DirectCase& dc : direct_cases()) {
    for (int n : dc.batches) {
      INFO(dc.label << ", n " << n);
      const mnist::Conv2dGeom geo = geom(dc, n);
      const mnist::Conv2dAlgorithms algorithms = g.conv2d_algorithms(geo);
      REQUIRE(algorithms.forward == "direct");
      REQUIRE(algorithms.backward_data == "direct");
      REQUIRE(algorithms.backward_weights == "direct");

      const std::size_t x_size = static_cast<std::size_t>(n) * dc.c * dc.h * dc.w;
      const std::size_t y_size = static_cast<std::size_t>(n) * dc.k * geo.out_h * geo.out_w;
      const std::size_t w_size = static_cast<std::size_t>(dc.k) * dc.c * dc.kh * dc.kw;
      auto x = upload(g, random_floats(x_size, 700 + n, -1.0f, 1.0f));
      auto w = upload(g, random_floats(w_size, 701 + n, -1.0f, 1.0f));
      auto b = upload(g, random_floats(dc.k, 702 + n, -1.0f, 1.0f));
      auto dy = upload(g, random_floats(y_size, 703 + n, -1.0f, 1.0f));
      mnist::DeviceBuffer<float> ws_cpu(
          cpu(), std::max<std::size_t>(1, cpu().conv2d_workspace_floats(geo)));
      const std::size_t ws = g.conv2d_workspace_floats(geo);
      mnist::DeviceBuffer<float> ws_gpu(g, ws + kGuard);
      g.fill(ws_gpu.data() + ws, kGuard, sentinel);
      const double patch = static_cast<double>(dc.c) * dc.kh * dc.kw;
      const double positions = static_cast<double>(n) * geo.out_h * geo.out_w;

      for (bool with_bias : {true, false}) {
        auto y = poisoned(g, y_size);
        cpu().conv2d_forward(geo, x.c(), w.c(), with_bias ? b.c() : nullptr, y.c(), ws_cpu.data());
        g.conv2d_forward(geo, x.g(), w.g(), with_bias ? b.g() : nullptr, y.g(), ws_gpu.data());
        expect_close(g, y, sum_atol(patch + 1), 1e-5,
                     with_bias ? "direct forward" : "direct forward (no bias)");
      }

      // forward_stats: the outputs as above, and their batch-norm sums, which the GPU takes in the
      // convolution's epilogue, against batch_norm_stats of the GPU's own outputs (so only the
      // order of summation differs): tolerances of the batch_norm_stats test, count = positions.
      {
        auto y = poisoned(g, y_size);
        auto sum = poisoned(g, dc.k);
        auto sumsq = poisoned(g, dc.k);
        cpu().conv2d_forward(geo, x.c(), w.c(), b.c(), y.c(), ws_cpu.data());
        g.fused().conv2d_forward_stats(geo, x.g(), w.g(), b.g(), y.g(), sum.g(), sumsq.g(), nullptr,
                                       ws_gpu.data());
        expect_close(g, y, sum_atol(patch + 1), 1e-5, "direct forward_stats y");
        auto y_gpu = upload(g, download(g, y.gpu));
        cpu().batch_norm_stats(mnist::ChannelGeom{n, dc.k, geo.out_h * geo.out_w}, y_gpu.c(),
                               sum.c(), sumsq.c());
        expect_close(g, sum, 1e-5 * positions, 1e-5, "direct forward_stats sum");
        expect_close(g, sumsq, 1e-5 * positions, 1e-5, "direct forward_stats sumsq");
      }

      auto dx = poisoned(g, x_size);
      cpu().conv2d_backward_data(geo, dy.c(), w.c(), dx.c(), ws_cpu.data());
      g.conv2d_backward_data(geo, dy.g(), w.g(), dx.g(), ws_gpu.data());
      expect_close(g, dx, sum_atol(static_cast<double>(dc.k) * dc.kh * dc.kw), 1e-5,
                   "direct backward_data");

      auto dw = poisoned(g, w_size);
      auto db = poisoned(g, dc.k);
      cpu().conv2d_backward_weights(geo, x.c(), dy.c(), dw.c(), db.c(), ws_cpu.data());
      g.conv2d_backward_weights(geo, x.g(), dy.g(), dw.g(), db.g(), ws_gpu.data());
      expect_close(g, dw, sum_atol(positions), 1e-5, "direct backward_weights dweight");
      expect_close(g, db, sum_atol(positions), 1e-5, "direct backward_weights dbias");

      // Bit-repeatable: a second run (no bias this time) gives the same bits.
      auto dw_again = poisoned(g, w_size);
      g.conv2d_backward_weights(geo, x.g(), dy.g(), dw_again.g(), nullptr, ws_gpu.data());
      const std::vector<float> first = download(g, dw.gpu), second = download(g, dw_again.gpu);
      CHECK(same_bits(first, second));

      // conv2d_backward: both directions in one grid (one launch where the two calls take two),
      // with the two calls' bits.
      auto dw_both = poisoned(g, w_size);
      auto db_both = poisoned(g, dc.k);
      auto dx_both = poisoned(g, x_size);
      const mnist::LaunchCounts before = g.counts();
      g.conv2d_backward(geo, x.g(), dy.g(), w.g(), dw_both.g(), nullptr, dx_both.g(),
                        ws_gpu.data());
      CHECK((g.counts() - before).kernels == 1);
      CHECK(same_bits(download(g, dw_both.gpu), first));
      CHECK(same_bits(download(g, dx_both.gpu), download(g, dx.gpu)));
      g.conv2d_backward(geo, x.g(), dy.g(), w.g(), dw_both.g(), db_both.g(), dx_both.g(),
                        ws_gpu.data());
      CHECK(same_bits(download(g, db_both.gpu), download(g, db.gpu)));
      CHECK(same_bits(download(g, dx_both.gpu), download(g, dx.gpu)));

      const std::vector<float> guard = host_copy(g, ws_gpu.data() + ws, kGuard);
      CHECK(std::count(guard.begin(), guard.end(), sentinel) == static_cast<long>(kGuard));
    }
  }
}

TEST_CASE("the direct kernels handle an empty batch", "[gpu][conv2d][direct_conv]") {
  Backend& g = gpu("native");
  const mnist::Conv2dGeom geo = geom(direct_cases()[1], 0);
  REQUIRE(g.conv2d_algorithms(geo).backward_weights == "direct");
  // No samples: the weight and bias gradients are sums over nothing, zero.
  const std::size_t w_size = static_cast<std::size_t>(geo.k) * geo.c * geo.kh * geo.kw;
  auto dw = poisoned(g, w_size);
  auto db = poisoned(g, geo.k);
  mnist::DeviceBuffer<float> ws(g, std::max<std::size_t>(1, g.conv2d_workspace_floats(geo)));
  mnist::DeviceBuffer<float> x(g, 1), dy(g, 1);
  g.conv2d_backward_weights(geo, x.data(), dy.data(), dw.g(), db.g(), ws.data());
  for (float v : download(g, dw.gpu)) CHECK(v == 0.0f);
  for (float v : download(g, db.gpu)) CHECK(v == 0.0f);
}

TEST_CASE("geometries outside the direct kernels run the implicit GEMM",
          "[gpu][conv2d][direct_conv]") {
  Backend& g = gpu("native");
  // Channel counts that are not compiled, and a compiled shape with stride 2.
  mnist::Conv2dGeom other = geom(direct_cases()[1], 4);
  other.c = 5;
  CHECK(g.conv2d_algorithms(other).forward == "native");
  mnist::Conv2dGeom strided = geom(direct_cases()[0], 4);
  strided.stride_h = strided.stride_w = 2;
  strided.out_h = strided.out_w = 14;
  CHECK(g.conv2d_algorithms(strided).forward == "native");
  CHECK(g.conv2d_algorithms(strided).backward_weights == "native");

  // forward_stats on that path: the implicit GEMM, then batch_norm_stats.
  const int n = 7;
  const std::size_t x_size = static_cast<std::size_t>(n) * strided.c * strided.h * strided.w;
  const std::size_t y_size = static_cast<std::size_t>(n) * strided.k * 14 * 14;
  const std::size_t w_size = static_cast<std::size_t>(strided.k) * strided.c * 25;
  strided.n = n;
  auto x = upload(g, random_floats(x_size, 801, -1.0f, 1.0f));
  auto w = upload(g, random_floats(w_size, 802, -1.0f, 1.0f));
  mnist::DeviceBuffer<float> ws_cpu(cpu(), cpu().conv2d_workspace_floats(strided));
  mnist::DeviceBuffer<float> ws_gpu(g,
                                    std::max<std::size_t>(1, g.conv2d_workspace_floats(strided)));
  auto y = poisoned(g, y_size);
  auto sum = poisoned(g, strided.k);
  auto sumsq = poisoned(g, strided.k);
  cpu().fused().conv2d_forward_stats(strided, x.c(), w.c(), nullptr, y.c(), sum.c(), sumsq.c(),
                                     nullptr, ws_cpu.data());
  g.fused().conv2d_forward_stats(strided, x.g(), w.g(), nullptr, y.g(), sum.g(), sumsq.g(), nullptr,
                                 ws_gpu.data());
  const double positions = static_cast<double>(n) * 14 * 14;
  expect_close(g, y, sum_atol(25 + 1), 1e-5, "implicit GEMM forward_stats y");
  // Both sides' sums start from their own outputs: atol also covers the outputs' differences.
  expect_close(g, sum, 1e-5 * positions, 1e-4, "implicit GEMM forward_stats sum");
  expect_close(g, sumsq, 1e-4 * positions, 1e-4, "implicit GEMM forward_stats sumsq");
}

// conv2d_forward_batch_norm (a conv block's training forward without sync batch norm): on the
// direct kernels the convolution's last block adds the tiles' sums in the two-launch path's fixed
// order and finalizes the batch norm, in ONE launch. So against the same backend's chain
// (conv2d_forward_stats, then batch_norm_finalize) every output is bit-equal; against the CPU's
// chain, applied to the GPU's own y (the convolution's rounding is the forward test's), mean and
// invstd and the running statistics agree within atol 1e-5, rtol 1e-5: the sums are the same
// double terms in another order, each rounded once to float (~6e-8 relative), and the variance
// (E[y^2] - mean^2 of values with variance ~1) loses at most a few bits of that.
TEST_CASE("conv2d_forward_batch_norm: the convolution's last block finalizes the batch norm",
          "[gpu][conv2d][direct_conv][fused]") {
  Backend& g = gpu("fused");
  auto counted = [&](auto&& call) {
    const mnist::LaunchCounts before = g.counts();
    call();
    return g.counts() - before;
  };
  const std::vector<std::size_t> picked{0, 1, 3, 4, 10, 11};  // seed convs, odd and tiled ones
  for (std::size_t index : picked) {
    const DirectCase& dc = direct_cases()[index];
    for (int n : {1, 7, 33, 257}) {
      if (index >= 3 && n > 33) continue;
      INFO(dc.label << ", n " << n);
      const mnist::Conv2dGeom geo = geom(dc, n);
      REQUIRE(g.conv2d_algorithms(geo).forward == "direct");
      const int k = dc.k;
      const std::size_t x_size = static_cast<std::size_t>(n) * dc.c * dc.h * dc.w;
      const std::size_t y_size = static_cast<std::size_t>(n) * k * geo.out_h * geo.out_w;
      const std::size_t w_size = static_cast<std::size_t>(k) * dc.c * dc.kh * dc.kw;
      const double count = static_cast<double>(n) * geo.out_h * geo.out_w;
      auto x = upload(g, random_floats(x_size, 1700 + n, -1.0f, 1.0f));
      auto w = upload(g, random_floats(w_size, 1701 + n, -1.0f, 1.0f));
      auto b = upload(g, random_floats(k, 1702 + n, -1.0f, 1.0f));
      const std::vector<float> running_mean0 = random_floats(k, 1703 + n, -1.0f, 1.0f);
      const std::vector<float> running_var0 = random_floats(k, 1704 + n, 0.5f, 2.0f);
      mnist::DeviceBuffer<float> ws(g, std::max<std::size_t>(1, g.conv2d_workspace_floats(geo)));

      // The chain on the GPU, and the fused call twice (the block counter must be back at zero
      // after each launch, or the second would finalize in the wrong block or not at all).
      struct Outputs {
        Twin<float> y, sums, mean, invstd, running_mean, running_var;
      };
      auto outputs = [&] {
        return Outputs{poisoned(g, y_size), poisoned(g, 2 * k),       poisoned(g, k),
                       poisoned(g, k),      upload(g, running_mean0), upload(g, running_var0)};
      };
      const float epsilon = 1e-3f, decay = 0.9f;
      auto finalize_of = [&](const Outputs& o) {
        return mnist::BatchNormFinalize{
            count, epsilon, decay, o.mean.g(), o.invstd.g(), o.running_mean.g(), o.running_var.g()};
      };
      Outputs chain = outputs();
      const mnist::LaunchCounts stats_counts = counted([&] {
        g.fused().conv2d_forward_stats(geo, x.g(), w.g(), b.g(), chain.y.g(), chain.sums.g(),
                                       chain.sums.g() + k, nullptr, ws.data());
      });
      CHECK(stats_counts.kernels == 1);  // the sums, too, in the convolution's launch
      g.batch_norm_finalize(k, count, chain.sums.g(), chain.sums.g() + k, epsilon, decay,
                            chain.mean.g(), chain.invstd.g(), chain.running_mean.g(),
                            chain.running_var.g());
      for (int run = 0; run < 2; ++run) {
        INFO("run " << run);
        Outputs fused = outputs();
        const mnist::LaunchCounts c = counted([&] {
          const mnist::BatchNormFinalize finalize = finalize_of(fused);
          g.fused().conv2d_forward_stats(geo, x.g(), w.g(), b.g(), fused.y.g(), fused.sums.g(),
                                         fused.sums.g() + k, &finalize, ws.data());
        });
        CHECK(c.kernels == 1);
        CHECK(c.copies == 0);
        CHECK(c.host_syncs == 0);
        for (auto [a, z, what] :
             {std::tuple{&chain.y, &fused.y, "y"}, std::tuple{&chain.sums, &fused.sums, "sums"},
              std::tuple{&chain.mean, &fused.mean, "mean"},
              std::tuple{&chain.invstd, &fused.invstd, "invstd"},
              std::tuple{&chain.running_mean, &fused.running_mean, "running_mean"},
              std::tuple{&chain.running_var, &fused.running_var, "running_var"}}) {
          INFO(what << " bit-equal to the chain's");
          CHECK(same_bits(download(g, a->gpu), download(g, z->gpu)));
        }
        if (run == 1) continue;
        // The CPU twin on the GPU's y.
        auto y_gpu = upload(g, download(g, fused.y.gpu));
        cpu().batch_norm_stats(mnist::ChannelGeom{n, k, geo.out_h * geo.out_w}, y_gpu.c(),
                               fused.sums.c(), fused.sums.c() + k);
        cpu().batch_norm_finalize(k, count, fused.sums.c(), fused.sums.c() + k, epsilon, decay,
                                  fused.mean.c(), fused.invstd.c(), fused.running_mean.c(),
                                  fused.running_var.c());
        expect_close(g, fused.sums, 1e-5 * count, 1e-5, "sums");
        expect_close(g, fused.mean, 1e-5, 1e-5, "mean");
        expect_close(g, fused.invstd, 1e-5, 1e-5, "invstd");
        expect_close(g, fused.running_mean, 1e-5, 1e-5, "running_mean");
        expect_close(g, fused.running_var, 1e-5, 1e-5, "running_var");
      }
    }
  }
}
