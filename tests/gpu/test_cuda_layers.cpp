// CUDA vs CPU through the Backend interface for the layers with engines: convolution, dense and
// batch norm (each engine: native, cublas, cudnn), plus max pooling. Tolerances are stated per
// kernel as |gpu - cpu| <= atol + rtol * |cpu|; for sums of products of values in [-1, 1], atol
// grows with the length of the reduction (float rounding in either implementation, any order).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "config/spellings.hpp"
#include "gpu/gpu_support.hpp"

using namespace gpu_test;
using mnist::Backend;

namespace {

// atol for a float dot product of `terms` products of magnitude <= 1.
double sum_atol(double terms) {
  return 1e-6 * std::max(1.0, terms) + 1e-6;
}

struct ConvCase {
  const char* label;
  int c, h, w, k, kh, kw, stride, pad_h, pad_w, out_h, out_w;
  std::vector<int> batches;
};

mnist::Conv2dGeom geom(const ConvCase& cc, int n) {
  mnist::Conv2dGeom g;
  g.n = n;
  g.c = cc.c;
  g.h = cc.h;
  g.w = cc.w;
  g.k = cc.k;
  g.kh = cc.kh;
  g.kw = cc.kw;
  g.stride_h = g.stride_w = cc.stride;
  g.pad_h = cc.pad_h;
  g.pad_w = cc.pad_w;
  g.out_h = cc.out_h;
  g.out_w = cc.out_w;
  return g;
}

}  // namespace

TEST_CASE("conv2d forward and backward match the CPU on every engine", "[gpu][conv2d]") {
  const std::vector<ConvCase> cases{
      // The seed network's two convolutions (SAME 5x5).
      {"seed conv1", 1, 28, 28, 6, 5, 5, 1, 2, 2, 28, 28, {1, 7, 33, 255, 257, kLargestConvBatch}},
      {"seed conv2", 6, 14, 14, 12, 5, 5, 1, 2, 2, 14, 14, {1, 7, 33, 257}},
      // Odd everything, stride 2, symmetric padding.
      {"3x3 stride 2", 3, 9, 7, 5, 3, 3, 2, 1, 1, 5, 4, {1, 7, 33, 257}},
      // Rectangular kernel, VALID.
      {"3x5 valid", 5, 8, 11, 7, 3, 5, 1, 0, 0, 6, 7, {1, 7, 33}},
      // 1x1, stride 3, many channels (tiles in both M and K).
      {"1x1 stride 3", 67, 5, 5, 70, 1, 1, 3, 0, 0, 2, 2, {1, 7, 33}},
      // TF SAME with an even kernel: one more padding row/column at the bottom/right than on top;
      // cuDNN cannot express it, so the cudnn engine must fall back to the native kernel.
      {"4x4 stride 2 SAME (asymmetric)", 2, 7, 7, 3, 4, 4, 2, 1, 1, 4, 4, {1, 7, 33}},
  };
  for (const std::string& engine : engines()) {
    Backend& g = gpu(engine);
    for (const ConvCase& cc : cases) {
      for (int n : cc.batches) {
        INFO("engine " << engine << ", " << cc.label << ", n " << n);
        const mnist::Conv2dGeom geo = geom(cc, n);
        const std::size_t x_size = static_cast<std::size_t>(n) * cc.c * cc.h * cc.w;
        const std::size_t y_size = static_cast<std::size_t>(n) * cc.k * cc.out_h * cc.out_w;
        const std::size_t w_size = static_cast<std::size_t>(cc.k) * cc.c * cc.kh * cc.kw;
        auto x = upload(g, random_floats(x_size, 100 + n, -1.0f, 1.0f));
        auto w = upload(g, random_floats(w_size, 101 + n, -1.0f, 1.0f));
        auto b = upload(g, random_floats(cc.k, 102 + n, -1.0f, 1.0f));
        auto dy = upload(g, random_floats(y_size, 103 + n, -1.0f, 1.0f));
        mnist::DeviceBuffer<float> ws_cpu(
            cpu(), std::max<std::size_t>(1, cpu().conv2d_workspace_floats(geo)));
        mnist::DeviceBuffer<float> ws_gpu(g,
                                          std::max<std::size_t>(1, g.conv2d_workspace_floats(geo)));
        const double patch = static_cast<double>(cc.c) * cc.kh * cc.kw;
        const double positions = static_cast<double>(n) * cc.out_h * cc.out_w;

        for (bool with_bias : {true, false}) {
          auto y = poisoned(g, y_size);
          cpu().conv2d_forward(geo, x.c(), w.c(), with_bias ? b.c() : nullptr, y.c(),
                               ws_cpu.data());
          g.conv2d_forward(geo, x.g(), w.g(), with_bias ? b.g() : nullptr, y.g(), ws_gpu.data());
          expect_close(g, y, sum_atol(patch + 1), 1e-5,
                       with_bias ? "conv2d_forward" : "conv2d_forward (no bias)");
        }
        auto dx = poisoned(g, x_size);
        cpu().conv2d_backward_data(geo, dy.c(), w.c(), dx.c(), ws_cpu.data());
        g.conv2d_backward_data(geo, dy.g(), w.g(), dx.g(), ws_gpu.data());
        expect_close(g, dx, sum_atol(cc.k * cc.kh * cc.kw), 1e-5, "conv2d_backward_data");

        auto dw = poisoned(g, w_size);
        auto db = poisoned(g, cc.k);
        cpu().conv2d_backward_weights(geo, x.c(), dy.c(), dw.c(), db.c(), ws_cpu.data());
        g.conv2d_backward_weights(geo, x.g(), dy.g(), dw.g(), db.g(), ws_gpu.data());
        expect_close(g, dw, sum_atol(positions), 1e-5, "conv2d_backward_weights dweight");
        expect_close(g, db, sum_atol(positions), 1e-5, "conv2d_backward_weights dbias");
        // dbias = nullptr: only dweight is produced.
        auto dw2 = poisoned(g, w_size);
        cpu().conv2d_backward_weights(geo, x.c(), dy.c(), dw2.c(), nullptr, ws_cpu.data());
        g.conv2d_backward_weights(geo, x.g(), dy.g(), dw2.g(), nullptr, ws_gpu.data());
        expect_close(g, dw2, sum_atol(positions), 1e-5, "conv2d_backward_weights (no bias)");
      }
    }
  }
}

TEST_CASE("max_pool forward and backward match the CPU", "[gpu][max_pool]") {
  Backend& g = gpu();
  struct PoolCase {
    const char* label;
    int c, h, w, size, stride, pad, out_h, out_w;
  };
  const std::vector<PoolCase> cases{
      {"2x2 stride 2", 3, 28, 28, 2, 2, 0, 14, 14},
      {"2x2 stride 2, odd input", 5, 9, 7, 2, 2, 0, 4, 3},
      {"3x3 stride 2 pad 1 (overlapping)", 3, 9, 9, 3, 2, 1, 5, 5},
      {"3x3 stride 1 pad 1 (heavy overlap)", 2, 7, 6, 3, 1, 1, 7, 6},
      // pad >= size: the first window row and column lie wholly in the padding (argmax -1).
      {"2x2 stride 2 pad 2 (windows all padding)", 2, 3, 5, 2, 2, 2, 3, 4},
  };
  for (const PoolCase& pc : cases) {
    for (int n : kSizes) {
      INFO(pc.label << ", n " << n);
      mnist::PoolGeom geo;
      geo.n = n;
      geo.c = pc.c;
      geo.h = pc.h;
      geo.w = pc.w;
      geo.size_h = geo.size_w = pc.size;
      geo.stride_h = geo.stride_w = pc.stride;
      geo.pad_h = geo.pad_w = pc.pad;
      geo.out_h = pc.out_h;
      geo.out_w = pc.out_w;
      const std::size_t x_size = static_cast<std::size_t>(n) * pc.c * pc.h * pc.w;
      const std::size_t y_size = static_cast<std::size_t>(n) * pc.c * pc.out_h * pc.out_w;
      // Negative values too: a padded position (zero) must never win.
      auto x = upload(g, random_floats(x_size, 200 + n, -2.0f, -0.5f + n % 2));
      auto y = poisoned(g, y_size);
      auto argmax = poisoned_ints(g, y_size);
      cpu().max_pool_forward(geo, x.c(), y.c(), argmax.c());
      g.max_pool_forward(geo, x.g(), y.g(), argmax.g());
      expect_close(g, y, 0.0, 0.0, "max_pool_forward");  // a selection: bit-exact
      expect_equal(g, argmax, "max_pool_forward argmax");
      auto dy = upload(g, random_floats(y_size, 201 + n, -1.0f, 1.0f));
      auto dx = poisoned(g, x_size);
      cpu().max_pool_backward(geo, dy.c(), argmax.c(), dx.c());
      g.max_pool_backward(geo, dy.g(), argmax.g(), dx.g());
      // Overlapping windows add up to size^2 values in some order.
      expect_close(g, dx, 1e-6 * pc.size * pc.size, 1e-6, "max_pool_backward");
    }
  }
}

TEST_CASE("dense forward and backward match the CPU on every engine", "[gpu][dense]") {
  struct Shape {
    int in, out;
  };
  const std::vector<Shape> shapes{{588, 100}, {100, 10}, {33, 7}, {1, 1}, {257, 65}};
  for (const std::string& engine : engines()) {
    Backend& g = gpu(engine);
    for (const Shape& s : shapes) {
      for (int n : kSizes) {
        INFO("engine " << engine << ", in " << s.in << ", out " << s.out << ", n " << n);
        auto x = upload(g, random_floats(static_cast<std::size_t>(n) * s.in, 300 + n, -1.0f, 1.0f));
        auto w =
            upload(g, random_floats(static_cast<std::size_t>(s.out) * s.in, 301 + n, -1.0f, 1.0f));
        auto b = upload(g, random_floats(s.out, 302 + n, -1.0f, 1.0f));
        auto dy =
            upload(g, random_floats(static_cast<std::size_t>(n) * s.out, 303 + n, -1.0f, 1.0f));
        for (bool with_bias : {true, false}) {
          auto y = poisoned(g, static_cast<std::size_t>(n) * s.out);
          cpu().dense_forward(n, s.in, s.out, x.c(), w.c(), with_bias ? b.c() : nullptr, y.c());
          g.dense_forward(n, s.in, s.out, x.g(), w.g(), with_bias ? b.g() : nullptr, y.g());
          expect_close(g, y, sum_atol(s.in + 1), 1e-5,
                       with_bias ? "dense_forward" : "dense_forward (no bias)");
        }
        auto dx = poisoned(g, static_cast<std::size_t>(n) * s.in);
        cpu().dense_backward_data(n, s.in, s.out, dy.c(), w.c(), dx.c());
        g.dense_backward_data(n, s.in, s.out, dy.g(), w.g(), dx.g());
        expect_close(g, dx, sum_atol(s.out), 1e-5, "dense_backward_data");
        auto dw = poisoned(g, static_cast<std::size_t>(s.out) * s.in);
        auto db = poisoned(g, s.out);
        cpu().dense_backward_weights(n, s.in, s.out, x.c(), dy.c(), dw.c(), db.c());
        g.dense_backward_weights(n, s.in, s.out, x.g(), dy.g(), dw.g(), db.g());
        expect_close(g, dw, sum_atol(n), 1e-5, "dense_backward_weights dweight");
        expect_close(g, db, sum_atol(n), 1e-5, "dense_backward_weights dbias");

        // The fused seam's dense_backward, both products in one call (one grid on the hand-written
        // engines, which the block plan asks for: supports(dense_backward)): the
        // bits of the two calls above, and one kernel more than nothing only for the bias.
        auto dx_both = poisoned(g, static_cast<std::size_t>(n) * s.in);
        auto dw_both = poisoned(g, static_cast<std::size_t>(s.out) * s.in);
        const mnist::LaunchCounts before = g.counts();
        g.fused().dense_backward(n, s.in, s.out, x.g(), dy.g(), w.g(), dw_both.g(), nullptr,
                                 dx_both.g());
        const mnist::LaunchCounts c = g.counts() - before;
        CHECK(c.kernels == (engine == "native" || engine == "fused" ? 1u : 2u));
        CHECK(same_bits(download(g, dx_both.gpu), download(g, dx.gpu)));
        CHECK(same_bits(download(g, dw_both.gpu), download(g, dw.gpu)));
        auto db_both = poisoned(g, s.out);
        g.fused().dense_backward(n, s.in, s.out, x.g(), dy.g(), w.g(), dw_both.g(), db_both.g(),
                                 nullptr);
        CHECK(same_bits(download(g, db_both.gpu), download(g, db.gpu)));
        CHECK(same_bits(download(g, dw_both.gpu), download(g, dw.gpu)));
      }
    }
  }
}

TEST_CASE("batch norm kernels match the CPU on every engine", "[gpu][batch_norm]") {
  struct BnCase {
    int c, hw;
  };
  // Conv-like (odd channel count, 5x5 planes) and dense-like (hw = 1).
  const std::vector<BnCase> cases{{3, 25}, {7, 1}, {100, 1}};
  const float epsilon = 1e-3f, decay = 0.9f;
  for (const std::string& engine : engines()) {
    Backend& g = gpu(engine);
    for (const BnCase& bc : cases) {
      for (int n : kSizes) {
        INFO("engine " << engine << ", c " << bc.c << ", hw " << bc.hw << ", n " << n);
        const mnist::ChannelGeom geo{n, bc.c, bc.hw};
        const std::size_t size = geo.count() * bc.c;
        const double count = static_cast<double>(geo.count());
        // A nonzero mean, so the variance is a difference of two sizeable sums.
        auto x = upload(g, random_floats(size, 400 + n, -1.0f, 2.0f));
        auto dy = upload(g, random_floats(size, 401 + n, -1.0f, 1.0f));
        auto gamma = upload(g, random_floats(bc.c, 402 + n, 0.5f, 1.5f));
        auto beta = upload(g, random_floats(bc.c, 403 + n, -0.5f, 0.5f));

        auto sum = poisoned(g, bc.c);
        auto sumsq = poisoned(g, bc.c);
        cpu().batch_norm_stats(geo, x.c(), sum.c(), sumsq.c());
        g.batch_norm_stats(geo, x.g(), sum.g(), sumsq.g());
        expect_close(g, sum, 1e-5 * count, 1e-5, "batch_norm_stats sum");
        expect_close(g, sumsq, 1e-5 * count, 1e-5, "batch_norm_stats sumsq");

        // The remaining kernels get identical inputs: the CPU's statistics, uploaded to both.
        auto cpu_sum = upload(g, download(cpu(), sum.cpu));
        auto cpu_sumsq = upload(g, download(cpu(), sumsq.cpu));
        auto mean = poisoned(g, bc.c);
        auto invstd = poisoned(g, bc.c);
        auto running_mean = upload(g, random_floats(bc.c, 404, -0.5f, 0.5f));
        auto running_var = upload(g, random_floats(bc.c, 405, 0.5f, 1.5f));
        if (count >= 2) {  // the unbiased running variance needs two values
          cpu().batch_norm_finalize(bc.c, count, cpu_sum.c(), cpu_sumsq.c(), epsilon, decay,
                                    mean.c(), invstd.c(), running_mean.c(), running_var.c());
          g.batch_norm_finalize(bc.c, count, cpu_sum.g(), cpu_sumsq.g(), epsilon, decay, mean.g(),
                                invstd.g(), running_mean.g(), running_var.g());
          expect_close(g, mean, 1e-6, 1e-5, "batch_norm_finalize mean");
          expect_close(g, invstd, 1e-6, 1e-4, "batch_norm_finalize invstd");
          expect_close(g, running_mean, 1e-6, 1e-5, "batch_norm_finalize running_mean");
          expect_close(g, running_var, 1e-6, 1e-4, "batch_norm_finalize running_var");
        }
        auto inf_mean = poisoned(g, bc.c);
        auto inf_invstd = poisoned(g, bc.c);
        cpu().batch_norm_inference_params(bc.c, running_mean.c(), running_var.c(), epsilon,
                                          inf_mean.c(), inf_invstd.c());
        g.batch_norm_inference_params(bc.c, running_mean.g(), running_var.g(), epsilon,
                                      inf_mean.g(), inf_invstd.g());
        expect_close(g, inf_mean, 1e-6, 1e-5, "batch_norm_inference_params mean");
        expect_close(g, inf_invstd, 1e-6, 1e-5, "batch_norm_inference_params invstd");

        auto m = upload(g, random_floats(bc.c, 406, 0.0f, 1.0f));
        auto is = upload(g, random_floats(bc.c, 407, 0.5f, 2.0f));
        for (bool affine : {true, false}) {
          auto y = poisoned(g, size);
          cpu().batch_norm_apply(geo, x.c(), m.c(), is.c(), affine ? gamma.c() : nullptr,
                                 affine ? beta.c() : nullptr, y.c());
          g.batch_norm_apply(geo, x.g(), m.g(), is.g(), affine ? gamma.g() : nullptr,
                             affine ? beta.g() : nullptr, y.g());
          expect_close(g, y, 1e-6, 1e-5,
                       affine ? "batch_norm_apply" : "batch_norm_apply (no affine)");
        }
        auto sum_dy = poisoned(g, bc.c);
        auto sum_dy_xhat = poisoned(g, bc.c);
        cpu().batch_norm_backward_reduce(geo, dy.c(), x.c(), m.c(), is.c(), sum_dy.c(),
                                         sum_dy_xhat.c());
        g.batch_norm_backward_reduce(geo, dy.g(), x.g(), m.g(), is.g(), sum_dy.g(),
                                     sum_dy_xhat.g());
        expect_close(g, sum_dy, 1e-5 * count, 1e-5, "batch_norm_backward_reduce sum_dy");
        expect_close(g, sum_dy_xhat, 4e-5 * count, 1e-5, "batch_norm_backward_reduce sum_dy_xhat");

        auto s1 = upload(g, download(cpu(), sum_dy.cpu));
        auto s2 = upload(g, download(cpu(), sum_dy_xhat.cpu));
        // The group may be larger than this slice (sync batch norm): use twice the local count.
        for (double group : {count, 2 * count}) {
          auto dx = poisoned(g, size);
          cpu().batch_norm_backward_apply(geo, dy.c(), x.c(), m.c(), is.c(), gamma.c(), s1.c(),
                                          s2.c(), group, dx.c());
          g.batch_norm_backward_apply(geo, dy.g(), x.g(), m.g(), is.g(), gamma.g(), s1.g(), s2.g(),
                                      group, dx.g());
          expect_close(g, dx, 1e-5, 1e-4, "batch_norm_backward_apply");
        }
      }
    }
  }
}

TEST_CASE("conv2d runs every smaller batch in the workspace sized for the largest",
          "[gpu][conv2d][workspace]") {
  // The model sizes ONE workspace per backend from conv2d_workspace_floats at its largest batch
  // (max of the training slice and the eval batch) and then runs smaller batches in it (eval
  // tails, a training slice below the eval batch). An engine that picks, for a smaller batch, an
  // algorithm needing more scratch would write past the buffer: a guard zone right after it must
  // come back untouched, and the results must still match the CPU.
  const ConvCase cases[] = {
      {"seed conv1", 1, 28, 28, 6, 5, 5, 1, 2, 2, 28, 28, {}},
      {"seed conv2", 6, 14, 14, 12, 5, 5, 1, 2, 2, 14, 14, {}},
  };
  const int max_batch = kLargestConvBatch;
  constexpr std::size_t kGuard = 1 << 20;  // floats after the workspace
  const float sentinel = -12345.5f;
  for (const std::string& engine : engines()) {
    // A fresh backend: nothing cached from the other tests' calls at these sizes.
    mnist::BackendOptions options;
    options.engine = mnist::parse_engine(engine, "gpu tests");
    const std::unique_ptr<Backend> fresh = mnist::make_cuda_backend(0, options);
    Backend& g = *fresh;
    for (const ConvCase& cc : cases) {
      const std::size_t ws =
          std::max<std::size_t>(1, g.conv2d_workspace_floats(geom(cc, max_batch)));
      mnist::DeviceBuffer<float> ws_gpu(g, ws + kGuard);
      g.fill(ws_gpu.data() + ws, kGuard, sentinel);
      for (int n : {max_batch, 1, 7, 33, 255, 257}) {
        INFO("engine " << engine << ", " << cc.label << ", n " << n << " in a workspace for "
                       << max_batch);
        const mnist::Conv2dGeom geo = geom(cc, n);
        const std::size_t x_size = static_cast<std::size_t>(n) * cc.c * cc.h * cc.w;
        const std::size_t y_size = static_cast<std::size_t>(n) * cc.k * cc.out_h * cc.out_w;
        const std::size_t w_size = static_cast<std::size_t>(cc.k) * cc.c * cc.kh * cc.kw;
        auto x = upload(g, random_floats(x_size, 500 + n, -1.0f, 1.0f));
        auto w = upload(g, random_floats(w_size, 501 + n, -1.0f, 1.0f));
        auto b = upload(g, random_floats(cc.k, 502 + n, -1.0f, 1.0f));
        auto dy = upload(g, random_floats(y_size, 503 + n, -1.0f, 1.0f));
        mnist::DeviceBuffer<float> ws_cpu(
            cpu(), std::max<std::size_t>(1, cpu().conv2d_workspace_floats(geo)));
        const double patch = static_cast<double>(cc.c) * cc.kh * cc.kw;
        const double positions = static_cast<double>(n) * cc.out_h * cc.out_w;
        auto y = poisoned(g, y_size);
        cpu().conv2d_forward(geo, x.c(), w.c(), b.c(), y.c(), ws_cpu.data());
        g.conv2d_forward(geo, x.g(), w.g(), b.g(), y.g(), ws_gpu.data());
        expect_close(g, y, sum_atol(patch + 1), 1e-5, "conv2d_forward");
        auto dx = poisoned(g, x_size);
        cpu().conv2d_backward_data(geo, dy.c(), w.c(), dx.c(), ws_cpu.data());
        g.conv2d_backward_data(geo, dy.g(), w.g(), dx.g(), ws_gpu.data());
        expect_close(g, dx, sum_atol(cc.k * cc.kh * cc.kw), 1e-5, "conv2d_backward_data");
        auto dw = poisoned(g, w_size);
        auto db = poisoned(g, cc.k);
        cpu().conv2d_backward_weights(geo, x.c(), dy.c(), dw.c(), db.c(), ws_cpu.data());
        g.conv2d_backward_weights(geo, x.g(), dy.g(), dw.g(), db.g(), ws_gpu.data());
        expect_close(g, dw, sum_atol(positions), 1e-5, "conv2d_backward_weights dweight");
        expect_close(g, db, sum_atol(positions), 1e-5, "conv2d_backward_weights dbias");

        std::vector<float> guard(kGuard);
        g.copy_to_host(guard.data(), ws_gpu.data() + ws, kGuard * sizeof(float));
        const auto overwritten =
            std::count_if(guard.begin(), guard.end(), [&](float v) { return v != sentinel; });
        INFO(overwritten << " floats written past the workspace of " << ws);
        CHECK(overwritten == 0);
      }
    }
  }
}
