// The batch gathered inside the network's first convolution (FusedKind::gathered_convolution,
// conv2d_forward_batch_norm_gathered; lib/backend/cuda/direct_conv.cu, GatherSource) against the
// two calls it stands for: gather_batch, then conv2d_forward_batch_norm.
//
// The fused kernel computes every value with the arithmetic of the two calls (the same byte / 255,
// the same correlation, the same fixed-order sums), so against the same backend's two calls every
// output must have the same bits, in one launch; against the CPU's chain the gathered images and
// labels are exact and y is within the direct convolution tests' tolerance. The geometries cover
// the seed's conv1 and the tf variant's, a single-pixel image and an image of several tile rows
// and columns with partial last tiles (each input pixel must be written by exactly one tile: the
// poisoned x catches a pixel no tile wrote). Batches 1, 7, 33, 257; the ring form reads the slot
// of the device's step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "gpu/gpu_support.hpp"

using namespace gpu_test;
using mnist::Backend;
using mnist::BatchGather;
using mnist::Conv2dGeom;
using mnist::DeviceBuffer;
using mnist::StepScalars;

namespace {

struct GatherCase {
  const char* label;
  int k, kernel, h, w;
};

// "same" padding: the output has the input's size.
Conv2dGeom same_geom(const GatherCase& gc, int n) {
  Conv2dGeom g;
  g.n = n;
  g.c = 1;
  g.h = gc.h;
  g.w = gc.w;
  g.k = gc.k;
  g.kh = g.kw = gc.kernel;
  g.stride_h = g.stride_w = 1;
  g.pad_h = g.pad_w = gc.kernel / 2;
  g.out_h = gc.h;
  g.out_w = gc.w;
  return g;
}

std::vector<uint8_t> bytes_of(const std::vector<int32_t>& ints) {
  return std::vector<uint8_t>(ints.begin(), ints.end());
}

constexpr float kEpsilon = 1e-3f, kDecay = 0.9f;

}  // namespace

TEST_CASE("the first convolution gathers the batch where it stages it: one launch, the same bits",
          "[gpu][fused][gather_fold]") {
  Backend& g = gpu("fused");
  const GatherCase cases[] = {{"seed conv1 1->6 5x5, 28x28", 6, 5, 28, 28},
                              {"tf conv1 1->12 5x5, 28x28", 12, 5, 28, 28},
                              {"1->6 5x5, 1x1", 6, 5, 1, 1},
                              {"1->6 5x5, 37x130 (3x3 tiles, partial)", 6, 5, 37, 130}};
  const int images = 40, ring_steps = 3;
  for (const GatherCase& gc : cases) {
    const int pixels = gc.h * gc.w;
    const auto px = upload(g, bytes_of(random_ints(std::size_t{images} * pixels, 11, 0, 255)));
    const auto lb = upload(g, bytes_of(random_ints(images, 12, 0, 9)));
    for (const int n : {1, 7, 33, 257}) {
      if (gc.h * gc.w > 1000 && n > 33) continue;  // the large image: keep the emulated run short
      INFO(gc.label << ", n " << n);
      const Conv2dGeom geo = same_geom(gc, n);
      REQUIRE(g.fused().supports(mnist::FusedShape::gathered_convolution(geo)));
      REQUIRE(g.conv2d_algorithms(geo).forward == "direct");
      const int k = gc.k;
      const std::size_t x_size = static_cast<std::size_t>(n) * pixels;
      const std::size_t y_size = static_cast<std::size_t>(n) * k * pixels;
      const double count = static_cast<double>(n) * pixels;
      const auto ring = upload(g, random_ints(std::size_t{ring_steps} * n, 13 + n, 0, images - 1));
      const auto w = upload(g, random_floats(static_cast<std::size_t>(k) * gc.kernel * gc.kernel,
                                             14 + n, -1.0f, 1.0f));
      const std::vector<float> running_mean0 = random_floats(k, 15 + n, -1.0f, 1.0f);
      const std::vector<float> running_var0 = random_floats(k, 16 + n, 0.5f, 2.0f);
      DeviceBuffer<float> ws(g, std::max<std::size_t>(1, g.conv2d_workspace_floats(geo)));
      DeviceBuffer<float> ws_cpu(cpu(),
                                 std::max<std::size_t>(1, cpu().conv2d_workspace_floats(geo)));
      StepScalars at;
      at.step = 5;  // slot 5 % 3 = 2 of the ring
      DeviceBuffer<StepScalars> step_gpu(g, 1), step_cpu(cpu(), 1);
      g.step_scalars_set(step_gpu.data(), at);
      cpu().step_scalars_set(step_cpu.data(), at);

      struct Outputs {
        Twin<float> x;
        Twin<int32_t> labels;
        Twin<float> y, sums, mean, invstd, running_mean, running_var;
      };
      auto outputs = [&] {
        return Outputs{poisoned(g, x_size),      poisoned_ints(g, n),    poisoned(g, y_size),
                       poisoned(g, 2 * k),       poisoned(g, k),         poisoned(g, k),
                       upload(g, running_mean0), upload(g, running_var0)};
      };
      auto gather_of = [&](const Outputs& o, bool on_gpu) {
        BatchGather b;
        b.images = on_gpu ? px.g() : px.c();
        b.labels = on_gpu ? lb.g() : lb.c();
        b.pixels = pixels;
        b.ring = on_gpu ? ring.g() : ring.c();
        b.ring_steps = ring_steps;
        b.step = on_gpu ? step_gpu.data() : step_cpu.data();
        b.x = on_gpu ? o.x.g() : o.x.c();
        b.y = on_gpu ? o.labels.g() : o.labels.c();
        return b;
      };
      auto finalize_of = [&](const Outputs& o, bool on_gpu) {
        return on_gpu ? mnist::BatchNormFinalize{count,
                                                 kEpsilon,
                                                 kDecay,
                                                 o.mean.g(),
                                                 o.invstd.g(),
                                                 o.running_mean.g(),
                                                 o.running_var.g()}
                      : mnist::BatchNormFinalize{
                            count,        kEpsilon,           kDecay,           o.mean.c(),
                            o.invstd.c(), o.running_mean.c(), o.running_var.c()};
      };

      // The two calls on the GPU.
      Outputs chain = outputs();
      g.gather_batch(gather_of(chain, true), n);
      const mnist::BatchNormFinalize finalize = finalize_of(chain, true);
      g.fused().conv2d_forward_stats(geo, chain.x.g(), w.g(), nullptr, chain.y.g(), chain.sums.g(),
                                     chain.sums.g() + k, &finalize, ws.data());
      // The fused call, twice (its last-block counter must be back at zero after a launch).
      for (int run = 0; run < 2; ++run) {
        INFO("run " << run);
        Outputs fused = outputs();
        const mnist::LaunchCounts before = g.counts();
        g.fused().conv2d_forward_batch_norm_gathered(
            geo, gather_of(fused, true), w.g(), nullptr, fused.y.g(), fused.sums.g(),
            fused.sums.g() + k, finalize_of(fused, true), ws.data());
        const mnist::LaunchCounts c = g.counts() - before;
        CHECK(c.kernels == 1);
        CHECK(c.copies == 0);
        CHECK(c.host_syncs == 0);
        {
          INFO("labels equal to gather_batch's");
          CHECK(download(g, chain.labels.gpu) == download(g, fused.labels.gpu));
        }
        for (auto [a, z, what] :
             {std::tuple{&chain.x, &fused.x, "x"}, std::tuple{&chain.y, &fused.y, "y"},
              std::tuple{&chain.sums, &fused.sums, "sums"},
              std::tuple{&chain.mean, &fused.mean, "mean"},
              std::tuple{&chain.invstd, &fused.invstd, "invstd"},
              std::tuple{&chain.running_mean, &fused.running_mean, "running_mean"},
              std::tuple{&chain.running_var, &fused.running_var, "running_var"}}) {
          INFO(what << " bit-equal to the two calls'");
          CHECK(same_bits(download(g, a->gpu), download(g, z->gpu)));
        }
        if (run == 1) continue;
        // The CPU backend's twin (the default: its own two calls) of the same slot.
        cpu().fused().conv2d_forward_batch_norm_gathered(
            geo, gather_of(fused, false), w.c(), nullptr, fused.y.c(), fused.sums.c(),
            fused.sums.c() + k, finalize_of(fused, false), ws_cpu.data());
        expect_close(g, fused.x, 0.0, 0.0, "gathered images against the CPU");
        expect_equal(g, fused.labels, "gathered labels against the CPU");
        // test_direct_conv.cpp's forward tolerance for kh*kw products of values in [0, 1] x [-1,
        // 1].
        const double terms = gc.kernel * gc.kernel;
        expect_close(g, fused.y, 1e-6 * terms + 1e-6, 1e-5, "y against the CPU");
        expect_close(g, fused.mean, 1e-5, 1e-4, "mean against the CPU");
        expect_close(g, fused.running_mean, 1e-5, 1e-4, "running_mean against the CPU");
      }
    }
  }
}

TEST_CASE("a convolution that cannot gather its batch gets it gathered first, with the same bits",
          "[gpu][fused][gather_fold]") {
  // The native engine fuses nothing; on the fused engine a convolution of several input channels,
  // or whose output is smaller than its input, cannot own each input pixel once.
  GatherCase seed{"seed conv1", 6, 5, 28, 28};
  const int n = 7, pixels = 28 * 28, images = 10;
  Conv2dGeom valid = same_geom(seed, n);
  valid.pad_h = valid.pad_w = 0;
  valid.out_h = valid.out_w = 24;
  const std::vector<std::tuple<std::string, Conv2dGeom>> refused{
      {"native, same padding", same_geom(seed, n)}, {"fused, no padding", valid}};
  for (const auto& [what, geo] : refused) {
    INFO(what);
    Backend& g = gpu(what.rfind("native", 0) == 0 ? "native" : "fused");
    CHECK_FALSE(g.fused().supports(mnist::FusedShape::gathered_convolution(geo)));
    const auto px = upload(g, bytes_of(random_ints(std::size_t{images} * pixels, 21, 0, 255)));
    const auto lb = upload(g, bytes_of(random_ints(images, 22, 0, 9)));
    const auto indices = upload(g, random_ints(n, 23, 0, images - 1));
    const auto w = upload(g, random_floats(6 * 25, 24, -1.0f, 1.0f));
    const std::size_t y_size = static_cast<std::size_t>(n) * 6 * geo.out_h * geo.out_w;
    const double count = static_cast<double>(n) * geo.out_h * geo.out_w;
    DeviceBuffer<float> ws(g, std::max<std::size_t>(1, g.conv2d_workspace_floats(geo)));
    auto run = [&](bool gathered) {
      auto x = poisoned(g, std::size_t{n} * pixels);
      auto labels = poisoned_ints(g, n);
      auto y = poisoned(g, y_size);
      auto stats = poisoned(g, 4 * 6);  // sum, sumsq, mean, invstd
      auto running = upload(g, std::vector<float>(12, 0.5f));
      const mnist::BatchNormFinalize bn{count,          kEpsilon,    kDecay,         stats.g() + 12,
                                        stats.g() + 18, running.g(), running.g() + 6};
      BatchGather b;
      b.images = px.g();
      b.labels = lb.g();
      b.pixels = pixels;
      b.ring = indices.g();
      b.x = x.g();
      b.y = labels.g();
      if (gathered) {
        g.fused().conv2d_forward_batch_norm_gathered(geo, b, w.g(), nullptr, y.g(), stats.g(),
                                                     stats.g() + 6, bn, ws.data());
      } else {
        g.gather_batch(b, n);
        g.fused().conv2d_forward_stats(geo, x.g(), w.g(), nullptr, y.g(), stats.g(), stats.g() + 6,
                                       &bn, ws.data());
      }
      return std::tuple{download(g, x.gpu), download(g, labels.gpu), download(g, y.gpu),
                        download(g, stats.gpu), download(g, running.gpu)};
    };
    const auto [x1, l1, y1, s1, r1] = run(false);
    const auto [x2, l2, y2, s2, r2] = run(true);
    CHECK(same_bits(x1, x2));
    CHECK(l1 == l2);
    CHECK(same_bits(y1, y2));
    CHECK(same_bits(s1, s2));
    CHECK(same_bits(r1, r2));
  }
}

TEST_CASE("gathering into a convolution checks the image size against the input",
          "[gpu][fused][gather_fold]") {
  const GatherCase seed{"seed conv1", 6, 5, 28, 28};
  const Conv2dGeom geo = same_geom(seed, 2);
  for (const std::string engine : {"fused", "native"}) {
    INFO(engine);
    Backend& g = gpu(engine);
    DeviceBuffer<float> x(g, 2 * 28 * 28), y(g, 2 * 6 * 28 * 28), stats(g, 4 * 6), running(g, 12),
        w(g, 6 * 25);
    DeviceBuffer<float> ws(g, std::max<std::size_t>(1, g.conv2d_workspace_floats(geo)));
    DeviceBuffer<uint8_t> px(g, 4 * 27 * 27), lb(g, 4);
    DeviceBuffer<int32_t> indices(g, 2), labels(g, 2);
    BatchGather b;
    b.images = px.data();
    b.labels = lb.data();
    b.pixels = 27 * 27;  // images of another dataset
    b.ring = indices.data();
    b.x = x.data();
    b.y = labels.data();
    const mnist::BatchNormFinalize bn{2.0 * 28 * 28,     kEpsilon,          kDecay,
                                      stats.data() + 12, stats.data() + 18, running.data(),
                                      running.data() + 6};
    CHECK_THROWS_WITH(
        g.fused().conv2d_forward_batch_norm_gathered(geo, b, w.data(), nullptr, y.data(),
                                                     stats.data(), stats.data() + 6, bn, ws.data()),
        Catch::Contains("729 pixels") && Catch::Contains("28x28"));
  }
}
