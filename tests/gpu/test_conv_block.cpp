// The fused conv block on the engine "fused" (batch_norm apply -> relu -> 2x2 max_pool and its
// backward, lib/backend/cuda/conv_block.cu) against its CPU twin (backend/cpu/native/conv_block),
// op by op on awkward sizes with poisoned outputs, and a whole replica of the seed network.
//
// Tolerances, |gpu - cpu| <= atol + rtol * |cpu|:
// - forward y and mask, backward_apply dx: 0 (bit for bit). Both twins evaluate the same float
//   expressions with each product and sum rounded on its own (the CUDA kernels say so with
//   __fmul_rn and kin, the CPU twin is compiled without FMA contraction), and the pool's winner is
//   a comparison of those values.
// - backward_reduce sums: atol 1e-9 * count, rtol 2.4e-7. Both twins add the same double terms
//   (|dy| <= 1, |x - mean| <= 2.3, invstd <= 2) in different orders: the double sums differ by at
//   most count^2 * 2^-53 * 4.6 < 1e-9 * count here, and each side rounds its sum to float once, so
//   the floats differ by at most an ulp or two (2^-23 = 1.2e-7 relative each). This is far inside
//   the batch-norm reduce's tolerance (1e-5 * count, rtol 1e-5; test_cuda_layers.cpp), which
//   allows for float terms.
// - the replica (forward_train + backward of the seed network, 7 samples, and an evaluation
//   forward): gpu_support.hpp, expect_replica_close.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cpu/native/conv_block.hpp"
#include "gpu/gpu_support.hpp"
#include "support/pool_geom.hpp"
#include "support/synthetic.hpp"

using namespace gpu_test;
using mnist::Backend;
using mnist::FusedShape;
using mnist::PoolGeom;

namespace {

using mnist::testing::block_geom;

// Multiples of 0.5 in [lo, hi]: with a power-of-two invstd the normalised values are exact, so
// windows hold ties and exact zeros (the ReLU's edge) often.
std::vector<float> halves(std::size_t n, uint32_t seed, int lo, int hi) {
  std::vector<int32_t> k = random_ints(n, seed, 2 * lo, 2 * hi);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = 0.5f * static_cast<float>(k[i]);
  return out;
}

// A mask buffer on both sides, every byte 0xff (no valid mask has bits above 2).
Twin<uint8_t> poisoned_mask(Backend& g, std::size_t n) {
  return upload(g, std::vector<uint8_t>(n, 0xff));
}

}  // namespace

TEST_CASE("bn_relu_pool on the fused engine matches the CPU twin", "[gpu][fused][conv_block]") {
  Backend& g = gpu("fused");
  struct Plane {
    int h, w;
  };
  // Pooled 14x14 and 7x7 (the seed's blocks), 2x2 with an odd height or width dropped, 1x1 with
  // both dropped, and 1x1 exactly.
  const std::vector<Plane> planes{{28, 28}, {14, 14}, {5, 4}, {4, 5}, {3, 3}, {2, 2}};
  for (const Plane& pl : planes) {
    for (int n : {1, 7, 33}) {
      // 600 channels: more than backward_apply keeps in shared memory (its per-window path);
      // once, as its 600-block reduce grids are slow to emulate.
      std::vector<int> channels{1, 6, 12};
      if (pl.h == 2 && n == 7) channels.push_back(600);
      for (int c : channels) {
        // Ties on the smaller planes only: the 28x28 ones take most of the emulated time.
        for (bool ties : {false, true}) {
          if (ties && pl.h == 28) continue;
          INFO(pl.h << "x" << pl.w << ", n " << n << ", c " << c << (ties ? ", ties" : ""));
          const PoolGeom pg = block_geom(n, c, pl.h, pl.w);
          const std::size_t full = static_cast<std::size_t>(n) * c * pl.h * pl.w;
          const std::size_t pooled = static_cast<std::size_t>(n) * c * pg.out_h * pg.out_w;
          const double count = static_cast<double>(n) * pl.h * pl.w;
          const uint32_t seed = 1000 * pl.h + 100 * n + 10 * c + ties;
          auto x =
              upload(g, ties ? halves(full, seed, -2, 2) : random_floats(full, seed, -2.0f, 2.0f));
          auto mean = upload(
              g, ties ? halves(c, seed + 1, -1, 1) : random_floats(c, seed + 1, -0.3f, 0.3f));
          auto invstd = upload(
              g, ties ? std::vector<float>(c, 2.0f) : random_floats(c, seed + 2, 0.5f, 2.0f));
          auto gamma = upload(g, random_floats(c, seed + 3, 0.5f, 1.5f));
          auto beta = upload(g, random_floats(c, seed + 4, -0.5f, 0.5f));
          auto dy = upload(g, random_floats(pooled, seed + 5, -1.0f, 1.0f));

          // Forward, with and without the affine parameters (the seed network has no gamma).
          for (int affine = 0; affine < 3; ++affine) {
            INFO("gamma " << (affine == 2) << ", beta " << (affine >= 1));
            const float* gc = affine == 2 ? gamma.c() : nullptr;
            const float* gg = affine == 2 ? gamma.g() : nullptr;
            const float* bc = affine >= 1 ? beta.c() : nullptr;
            const float* bg = affine >= 1 ? beta.g() : nullptr;
            auto y = poisoned(g, pooled);
            auto mask = poisoned_mask(g, pooled);
            cpu().fused().bn_relu_pool_forward(pg, x.c(), mean.c(), invstd.c(), gc, bc, y.c(),
                                               mask.c());
            g.fused().bn_relu_pool_forward(pg, x.g(), mean.g(), invstd.g(), gg, bg, y.g(),
                                           mask.g());
            check_same_bits(g, y, "bn_relu_pool_forward y");
            CHECK(same_bits(download(cpu(), mask.cpu), download(g, mask.gpu)));
          }

          // Backward on identical inputs: the CPU's mask (with gamma and beta) on both sides.
          auto y = poisoned(g, pooled);
          auto cpu_mask = poisoned_mask(g, pooled);
          cpu().fused().bn_relu_pool_forward(pg, x.c(), mean.c(), invstd.c(), gamma.c(), beta.c(),
                                             y.c(), cpu_mask.c());
          auto mask = upload(g, download(cpu(), cpu_mask.cpu));

          auto sum_dy = poisoned(g, c);
          auto sum_dy_xhat = poisoned(g, c);
          cpu().fused().bn_relu_pool_backward_reduce(pg, dy.c(), mask.c(), x.c(), mean.c(),
                                                     invstd.c(), sum_dy.c(), sum_dy_xhat.c());
          g.fused().bn_relu_pool_backward_reduce(pg, dy.g(), mask.g(), x.g(), mean.g(), invstd.g(),
                                                 sum_dy.g(), sum_dy_xhat.g());
          const double pooled_count = static_cast<double>(n) * pg.out_h * pg.out_w;
          expect_close(g, sum_dy, 1e-9 * pooled_count, 2.4e-7,
                       "bn_relu_pool_backward_reduce sum_dy");
          expect_close(g, sum_dy_xhat, 1e-9 * pooled_count, 2.4e-7,
                       "bn_relu_pool_backward_reduce sum_dy_xhat");
          // A second run gives the same bits: the sums' order depends on the sizes alone.
          auto again = poisoned(g, c);
          auto again_xhat = poisoned(g, c);
          g.fused().bn_relu_pool_backward_reduce(pg, dy.g(), mask.g(), x.g(), mean.g(), invstd.g(),
                                                 again.g(), again_xhat.g());
          CHECK(same_bits(download(g, sum_dy.gpu), download(g, again.gpu)));
          CHECK(same_bits(download(g, sum_dy_xhat.gpu), download(g, again_xhat.gpu)));

          // Apply with the CPU's sums on both sides; the group may be larger than this slice
          // (sync batch norm); with gamma, and without (the seed network's).
          auto s1 = upload(g, download(cpu(), sum_dy.cpu));
          auto s2 = upload(g, download(cpu(), sum_dy_xhat.cpu));
          for (double group : {count, 2 * count}) {
            const bool with_gamma = group == count;
            INFO("group " << group << ", gamma " << with_gamma);
            auto dx = poisoned(g, full);
            cpu().fused().bn_relu_pool_backward_apply(pg, dy.c(), mask.c(), x.c(), mean.c(),
                                                      invstd.c(), with_gamma ? gamma.c() : nullptr,
                                                      s1.c(), s2.c(), group, dx.c());
            g.fused().bn_relu_pool_backward_apply(pg, dy.g(), mask.g(), x.g(), mean.g(), invstd.g(),
                                                  with_gamma ? gamma.g() : nullptr, s1.g(), s2.g(),
                                                  group, dx.g());
            check_same_bits(g, dx, "bn_relu_pool_backward_apply dx");
          }
        }
      }
    }
  }
}

TEST_CASE("bn_relu_pool forward keeps NaN and infinities where the CPU twin does",
          "[gpu][fused][conv_block]") {
  Backend& g = gpu("fused");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // One plane of 2x8: windows {-1 -2 | -3 -4} (nothing passes), {3 5 | 5 nan} (a tie, first
  // wins), {nan 1 | 2 3} (NaN first: kept, and it stops the gradient), {-inf 0 | inf 1} (inf,
  // bottom left, wins).
  const PoolGeom pg = block_geom(1, 1, 2, 8);
  auto x = upload(g, std::vector<float>{-1, -2, 3, 5, nan, 1, -inf, 0,  //
                                        -3, -4, 5, nan, 2, 3, inf, 1});
  auto mean = upload(g, std::vector<float>{0.0f});
  auto invstd = upload(g, std::vector<float>{1.0f});
  auto y = poisoned(g, 4);
  auto mask = poisoned_mask(g, 4);
  cpu().fused().bn_relu_pool_forward(pg, x.c(), mean.c(), invstd.c(), nullptr, nullptr, y.c(),
                                     mask.c());
  g.fused().bn_relu_pool_forward(pg, x.g(), mean.g(), invstd.g(), nullptr, nullptr, y.g(),
                                 mask.g());
  const std::vector<float> yc = download(cpu(), y.cpu), yg = download(g, y.gpu);
  for (int i = 0; i < 4; ++i) {
    INFO("window " << i << ": cpu " << yc[i] << ", gpu " << yg[i]);
    // NaN's bits may differ (a GPU makes its own NaN), being NaN may not.
    CHECK(std::isnan(yc[i]) == std::isnan(yg[i]));
    if (!std::isnan(yc[i])) CHECK(yc[i] == yg[i]);
  }
  CHECK(yc[0] == 0.0f);
  CHECK(yc[1] == 5.0f);
  CHECK(std::isnan(yc[2]));
  CHECK(yc[3] == inf);
  const std::vector<uint8_t> mc = download(cpu(), mask.cpu), mg = download(g, mask.gpu);
  CHECK(mg == mc);
  CHECK(mc == std::vector<uint8_t>{0, 1 | mnist::cpu::native::kPassedRelu, 0,
                                   2 | mnist::cpu::native::kPassedRelu});
}

TEST_CASE("only the fused engine fuses the conv block, on the pools the CPU twin takes",
          "[gpu][fused][conv_block]") {
  Backend& fused = gpu("fused");
  Backend& native = gpu("native");
  std::vector<PoolGeom> geoms{block_geom(4, 6, 28, 28), block_geom(4, 12, 14, 14),
                              block_geom(1, 1, 3, 3), block_geom(1, 1, 2, 2)};
  PoolGeom wide = block_geom(4, 6, 28, 28);
  wide.size_h = wide.size_w = 3;  // 3x3 windows
  PoolGeom overlapping = block_geom(4, 6, 28, 28);
  overlapping.stride_h = overlapping.stride_w = 1;
  overlapping.out_h = overlapping.out_w = 27;
  PoolGeom padded = block_geom(4, 6, 28, 28);
  padded.pad_h = padded.pad_w = 1;
  padded.out_h = padded.out_w = 15;
  PoolGeom ceil_mode = block_geom(4, 6, 5, 5);
  ceil_mode.out_h = ceil_mode.out_w = 3;              // the odd row kept
  const PoolGeom too_small = block_geom(4, 6, 1, 8);  // out_h 0
  for (const PoolGeom& bad : {wide, overlapping, padded, ceil_mode, too_small}) {
    geoms.push_back(bad);
  }
  for (std::size_t i = 0; i < geoms.size(); ++i) {
    INFO("geometry " << i);
    const bool expected = mnist::cpu::native::conv_block_pool_supported(geoms[i]);
    CHECK(expected == (i < 4));
    CHECK(fused.fused().supports(FusedShape::conv_block({}, geoms[i], false)) == expected);
    CHECK_FALSE(native.fused().supports(FusedShape::conv_block({}, geoms[i], false)));
  }

  // Called where supports(conv_block) said no: refused, naming what is wrong.
  const PoolGeom seed1 = geoms[0];
  mnist::DeviceBuffer<float> x(native, 4 * 6 * 28 * 28), y(native, 4 * 6 * 14 * 14),
      stats(native, 6);
  mnist::DeviceBuffer<uint8_t> mask(native, 4 * 6 * 14 * 14);
  CHECK_THROWS_WITH(
      native.fused().bn_relu_pool_forward(seed1, x.data(), stats.data(), stats.data(), nullptr,
                                          nullptr, y.data(), mask.data()),
      Catch::Contains("bn_relu_pool_forward") && Catch::Contains("not implemented by this engine"));
  mnist::DeviceBuffer<float> fx(fused, 4 * 6 * 28 * 28), fy(fused, 4 * 6 * 15 * 15),
      fstats(fused, 6);
  mnist::DeviceBuffer<uint8_t> fmask(fused, 4 * 6 * 15 * 15);
  CHECK_THROWS_WITH(
      fused.fused().bn_relu_pool_forward(padded, fx.data(), fstats.data(), fstats.data(), nullptr,
                                         nullptr, fy.data(), fmask.data()),
      Catch::Contains("2x2 pooling") && Catch::Contains("padding 1x1"));
}

TEST_CASE("each bn_relu_pool op is one kernel launch", "[gpu][fused][conv_block][counts]") {
  Backend& g = gpu("fused");
  const PoolGeom pg = block_geom(7, 6, 14, 14);
  const std::size_t full = 7 * 6 * 14 * 14, pooled = 7 * 6 * 7 * 7;
  mnist::DeviceBuffer<float> x(g, full), y(g, pooled), dy(g, pooled), dx(g, full),
      per_channel(g, 6), sums(g, 12);
  mnist::DeviceBuffer<uint8_t> mask(g, pooled);
  g.fill(x.data(), full, 0.5f);
  g.fill(dy.data(), pooled, 0.25f);
  g.fill(per_channel.data(), 6, 1.0f);
  g.fill(sums.data(), 12, 1.0f);
  const mnist::LaunchCounts forward = counted(g, [&] {
    g.fused().bn_relu_pool_forward(pg, x.data(), per_channel.data(), per_channel.data(), nullptr,
                                   per_channel.data(), y.data(), mask.data());
  });
  const mnist::LaunchCounts reduce = counted(g, [&] {
    g.fused().bn_relu_pool_backward_reduce(pg, dy.data(), mask.data(), x.data(), per_channel.data(),
                                           per_channel.data(), sums.data(), sums.data() + 6);
  });
  const mnist::LaunchCounts apply = counted(g, [&] {
    g.fused().bn_relu_pool_backward_apply(pg, dy.data(), mask.data(), x.data(), per_channel.data(),
                                          per_channel.data(), nullptr, sums.data(), sums.data() + 6,
                                          7.0 * 14 * 14, dx.data());
  });
  // No copies (the reduce's last block leaves the stream's block counter at zero for the next
  // kernel, so no memset precedes it) and no waits for the device.
  struct Op {
    const char* what;
    mnist::LaunchCounts counts;
  };
  for (const Op& op : {Op{"forward", forward}, Op{"reduce", reduce}, Op{"apply", apply}}) {
    const mnist::LaunchCounts& c = op.counts;
    INFO(op.what << ": kernels " << c.kernels << ", copies " << c.copies << ", host syncs "
                 << c.host_syncs);
    CHECK(c.kernels == 1);
    CHECK(c.library_calls == 0);
    CHECK(c.copies == 0);
    CHECK(c.host_syncs == 0);
  }
}

TEST_CASE("a seed-network replica on the fused engine runs conv blocks and matches the CPU",
          "[gpu][fused][conv_block]") {
  const ReplicaRun want = run_replica(cpu(), mnist::testing::seed_network_yaml());
  const ReplicaRun got = run_replica(gpu("fused"), mnist::testing::seed_network_yaml());
  // The two conv2d -> batch_norm -> relu -> max_pool runs are one layer each, on both (and on the
  // fused engine batch_norm -> relu -> dropout one more: test_dense_block.cpp).
  for (const ReplicaRun* run : {&want, &got}) {
    REQUIRE(run->labels.size() >= 2);
    CHECK(run->labels[0] == "0:conv2d+batch_norm+relu+max_pool");
    CHECK(run->labels[1] == "4:conv2d+batch_norm+relu+max_pool");
  }
  expect_replica_close(want, got);  // tolerances: gpu_support.hpp
}

// conv_block_backward: the batch norm's backward apply computed where the convolution's backward
// stages its dy (direct_conv.cu with conv_block_gradient.cuh), never stored. Against the same
// engine's two calls (bn_relu_pool_backward_apply into dconv, then conv2d_backward): dweight and
// dx bit for bit (the same float expressions, the same sums in the same order), in one launch,
// dconv left untouched. Against the CPU twin (the same chain): the tolerances of the direct
// convolution test (sum of `terms` products: atol 1e-6 * terms + 1e-6, rtol 1e-5), with the
// staged values of magnitude up to ~4 (k <= 2, |d| <= 1, xhat terms) rather than 1: atol x4.
TEST_CASE("conv_block_backward stages the batch norm's gradient inside the convolution's backward",
          "[gpu][fused][conv_block]") {
  Backend& g = gpu("fused");
  struct Case {
    const char* label;
    int c, k, h, w, pad;  // 5x5 kernel, stride 1
    std::vector<int> batches;
  };
  const std::vector<Case> cases{
      {"seed conv1 (1->6, 28x28 same)", 1, 6, 28, 28, 2, {1, 7, 33}},
      {"seed conv2 (6->12, 14x14 same)", 6, 12, 14, 14, 2, {1, 7, 33}},
      {"1->6 9x13 valid (output 5x9: a dropped row and column)", 1, 6, 9, 13, 0, {1, 7}},
  };
  for (const Case& cs : cases) {
    for (int n : cs.batches) {
      for (const bool with_dx : {true, false}) {
        INFO(cs.label << ", n " << n << (with_dx ? ", dx" : ", no dx"));
        mnist::Conv2dGeom geo;
        geo.n = n, geo.c = cs.c, geo.h = cs.h, geo.w = cs.w, geo.k = cs.k, geo.kh = geo.kw = 5;
        geo.pad_h = geo.pad_w = cs.pad;
        geo.out_h = cs.h + 2 * cs.pad - 4, geo.out_w = cs.w + 2 * cs.pad - 4;
        REQUIRE(g.conv2d_algorithms(geo).backward_weights == "direct");
        const PoolGeom pg = block_geom(n, cs.k, geo.out_h, geo.out_w);
        const std::size_t x_size = static_cast<std::size_t>(n) * cs.c * cs.h * cs.w;
        const std::size_t conv_size = static_cast<std::size_t>(n) * cs.k * geo.out_h * geo.out_w;
        const std::size_t pooled = static_cast<std::size_t>(n) * cs.k * pg.out_h * pg.out_w;
        const std::size_t w_size = static_cast<std::size_t>(cs.k) * cs.c * 25;
        auto x = upload(g, random_floats(x_size, 2100 + n, -1.0f, 1.0f));
        auto weight = upload(g, random_floats(w_size, 2101 + n, -1.0f, 1.0f));
        auto conv_out = upload(g, halves(conv_size, 2102 + n, -2, 2));
        auto mean = upload(g, random_floats(cs.k, 2103 + n, -0.25f, 0.25f));
        auto invstd = upload(g, std::vector<float>(cs.k, 1.0f));
        auto gamma = upload(g, random_floats(cs.k, 2104 + n, 0.5f, 2.0f));
        auto sums =
            upload(g, random_floats(2 * static_cast<std::size_t>(cs.k), 2105 + n, -3.0f, 3.0f));
        auto dy = upload(g, random_floats(pooled, 2106 + n, -1.0f, 1.0f));
        // A real mask: the forward of the block on these values (ties and zeros included).
        auto y = poisoned(g, pooled);
        auto mask = poisoned_mask(g, pooled);
        g.fused().bn_relu_pool_forward(pg, conv_out.g(), mean.g(), invstd.g(), gamma.g(), nullptr,
                                       y.g(), mask.g());
        cpu().fused().bn_relu_pool_forward(pg, conv_out.c(), mean.c(), invstd.c(), gamma.c(),
                                           nullptr, y.c(), mask.c());
        auto block_of = [&](bool on_gpu) {
          mnist::ConvBlockGradient b;
          b.pool = pg;
          b.dy = on_gpu ? dy.g() : dy.c();
          b.mask = on_gpu ? mask.g() : mask.c();
          b.conv_out = on_gpu ? conv_out.g() : conv_out.c();
          b.mean = on_gpu ? mean.g() : mean.c();
          b.invstd = on_gpu ? invstd.g() : invstd.c();
          b.gamma = on_gpu ? gamma.g() : gamma.c();
          b.sum_dy = on_gpu ? sums.g() : sums.c();
          b.sum_dy_xhat = (on_gpu ? sums.g() : sums.c()) + cs.k;
          b.count = static_cast<double>(n) * geo.out_h * geo.out_w;
          return b;
        };
        mnist::DeviceBuffer<float> ws_gpu(g,
                                          std::max<std::size_t>(1, g.conv2d_workspace_floats(geo)));
        mnist::DeviceBuffer<float> ws_cpu(
            cpu(), std::max<std::size_t>(1, cpu().conv2d_workspace_floats(geo)));

        // The two calls on the GPU.
        auto dconv_chain = poisoned(g, conv_size);
        auto dw_chain = poisoned(g, w_size);
        auto dx_chain = poisoned(g, x_size);
        const mnist::ConvBlockGradient b = block_of(true);
        g.fused().bn_relu_pool_backward_apply(pg, b.dy, b.mask, b.conv_out, b.mean, b.invstd,
                                              b.gamma, b.sum_dy, b.sum_dy_xhat, b.count,
                                              dconv_chain.g());
        g.conv2d_backward(geo, x.g(), dconv_chain.g(), weight.g(), dw_chain.g(), nullptr,
                          with_dx ? dx_chain.g() : nullptr, ws_gpu.data());
        // The fused call, and the CPU twin.
        auto dconv = poisoned(g, conv_size);
        auto dw = poisoned(g, w_size);
        auto dx = poisoned(g, x_size);
        const mnist::LaunchCounts c = counted(g, [&] {
          g.fused().conv_block_backward(geo, b, x.g(), weight.g(), dw.g(), nullptr,
                                        with_dx ? dx.g() : nullptr, dconv.g(), ws_gpu.data());
        });
        CHECK(c.kernels == 1);
        CHECK(c.copies == 0);
        CHECK(c.host_syncs == 0);
        cpu().fused().conv_block_backward(geo, block_of(false), x.c(), weight.c(), dw.c(), nullptr,
                                          with_dx ? dx.c() : nullptr, dconv.c(), ws_cpu.data());
        CHECK(same_bits(download(g, dw.gpu), download(g, dw_chain.gpu)));
        CHECK(same_bits(download(g, dx.gpu), download(g, dx_chain.gpu)));
        const std::vector<float> untouched = download(g, dconv.gpu);
        CHECK(
            std::all_of(untouched.begin(), untouched.end(), [](float v) { return std::isnan(v); }));
        // So it says it needs no dconv here (a layer then allocates none), and takes nullptr; a
        // bias gradient, or the CPU, takes the two calls and needs it.
        CHECK(g.fused().workspace_floats(FusedShape::conv_block(geo, pg, false)) == 0);
        CHECK(g.fused().workspace_floats(FusedShape::conv_block(geo, pg, true)) > 0);
        CHECK(cpu().fused().workspace_floats(FusedShape::conv_block(geo, pg, false)) > 0);
        auto dw_again = poisoned(g, w_size);
        g.fused().conv_block_backward(geo, b, x.g(), weight.g(), dw_again.g(), nullptr,
                                      with_dx ? dx.g() : nullptr, nullptr, ws_gpu.data());
        CHECK(same_bits(download(g, dw_again.gpu), download(g, dw_chain.gpu)));
        const double positions = static_cast<double>(n) * geo.out_h * geo.out_w;
        expect_close(g, dw, 4 * (1e-6 * positions + 1e-6), 1e-5, "dweight");
        if (with_dx) expect_close(g, dx, 4 * (1e-6 * cs.k * 25 + 1e-6), 1e-5, "dx");
      }
    }
  }
}
