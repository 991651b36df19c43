// The fused dense tail on the engine "fused" (FusedKind::dense_tail: a dense layer, the dense
// block after it and the head as three calls, lib/backend/cuda/dense.cu and dense_head.cu) against
// the CPU chains they stand for (backend.cpp), op by op on awkward sizes with poisoned outputs.
//
// Where the fused kernels run the same float arithmetic as a kernel the GPU already has, the test
// asks for the same bits, which no tolerance can hide a dropped term behind:
// - dense_block_softmax_cross_entropy's head gradients and metrics: the GPU's unfused head
//   (dense_softmax_cross_entropy) on the block's output computed by the CPU chain (the fused
//   kernel computes it with the CPU's rounding, dense_block_terms.cuh); its dbn: the CPU's
//   dropout_backward and relu_backward of that unfused head's dx;
// - dense_forward_batch_norm's y: the GPU's dense_forward bit for bit where `in` is too small to
//   split (<= 128), else the same bits on a second run, and the CPU's within the GEMM's tolerance;
// - dense_backward_batch_norm's dx: the GPU's dense_backward of the CPU chain's
//   batch_norm_backward_apply (the staged apply rounds as the CPU does, conv_block_gradient.cuh);
//   its dweight likewise where the batch is too small to split the weights' sums (n <= 64), and
//   elsewhere (the sums split over the batch, added in split order) the same bits on a second run
//   and the CPU chain's within the GEMM's tolerance.
// The sums the fused kernels add in their own order (statistics, and the gradient sums that become
// dbeta and dgamma) are double sums of the same float terms rounded to float once, against the
// CPU's of the same inputs: atol 1e-9 * n, rtol 1e-6 for sums and sums of products (an ulp or two,
// 2^-23 = 1.2e-7 relative each, for |terms| <= 4), mean and running statistics; invstd, one
// square root of a difference of such sums further: atol 1e-9 * n, rtol 1e-5. Against the whole
// CPU chain (its GEMMs summing in another order) the stated tolerances of test_cuda_layers.cpp and
// test_fused_ops.cpp apply.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gpu/gpu_support.hpp"

using namespace gpu_test;
using mnist::Backend;
using mnist::BatchNormFinalize;
using mnist::BatchNormGradient;
using mnist::DenseBlockInput;
using mnist::StepScalars;

namespace {

constexpr float kEpsilon = 1e-3f, kDecay = 0.9f;

void check_same_bits(const std::vector<float>& want, const std::vector<float>& got,
                     const std::string& what) {
  INFO(what);
  REQUIRE(want.size() == got.size());
  std::size_t differ = 0, first = want.size();
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!same_bits(std::vector<float>{want[i]}, std::vector<float>{got[i]})) {
      if (differ++ == 0) first = i;
    }
  }
  INFO(differ << " elements differ; the first at " << first << ": " << (differ ? want[first] : 0.0f)
              << " wanted, " << (differ ? got[first] : 0.0f));
  CHECK(differ == 0);
}

mnist::DeviceBuffer<float> workspace(Backend& be, int n, int in, int c, int k) {
  return mnist::DeviceBuffer<float>(
      be, std::max<std::size_t>(
              1, be.fused().workspace_floats(mnist::FusedShape::dense_tail(n, in, c, k))));
}

std::vector<float> cpu_only(const std::vector<float>& host,
                            const std::function<void(const float*, float*)>& op, std::size_t out) {
  Backend& be = cpu();
  mnist::DeviceBuffer<float> in(be, host.size()), result(be, out);
  be.copy_to_device(in.data(), host.data(), host.size() * sizeof(float));
  op(in.data(), result.data());
  return download(be, result);
}

}  // namespace

TEST_CASE("dense_forward_batch_norm: the dense layer's tiles take and finalize the statistics",
          "[gpu][fused][dense_tail]") {
  Backend& g = gpu("fused");
  struct Shape {
    int in, out;
  };
  for (const Shape s : {Shape{588, 100}, Shape{1, 1}, Shape{65, 7}, Shape{33, 129}}) {
    for (int n : {1, 7, 33, 257}) {
      for (bool with_bias : {false, true}) {
        INFO("in " << s.in << ", out " << s.out << ", n " << n << (with_bias ? ", bias" : ""));
        const uint32_t seed = 1000 * n + s.out + (with_bias ? 7 : 0);
        const std::size_t v = static_cast<std::size_t>(n) * s.out;
        auto x = upload(g, random_floats(static_cast<std::size_t>(n) * s.in, seed, -1.0f, 1.0f));
        const float scale = 1.0f / std::sqrt(static_cast<float>(s.in));
        auto w = upload(
            g, random_floats(static_cast<std::size_t>(s.out) * s.in, seed + 1, -scale, scale));
        auto b = upload(g, random_floats(s.out, seed + 2, -0.5f, 0.5f));
        const std::vector<float> rm0 = random_floats(s.out, seed + 3, -0.5f, 0.5f);
        const std::vector<float> rv0 = random_floats(s.out, seed + 4, 0.5f, 2.0f);
        auto running_mean = upload(g, rm0), running_var = upload(g, rv0);
        auto y = poisoned(g, v);
        auto mean = poisoned(g, s.out), invstd = poisoned(g, s.out);
        auto ws_cpu = workspace(cpu(), n, s.in, s.out, 10);
        auto ws_gpu = workspace(g, n, s.in, s.out, 10);
        const float* bc = with_bias ? b.c() : nullptr;
        const float* bg = with_bias ? b.g() : nullptr;
        cpu().fused().dense_forward_batch_norm(
            n, s.in, s.out, x.c(), w.c(), bc, y.c(),
            BatchNormFinalize{static_cast<double>(n), kEpsilon, kDecay, mean.c(), invstd.c(),
                              running_mean.c(), running_var.c()},
            ws_cpu.data());
        const mnist::LaunchCounts counts = counted(g, [&] {
          g.fused().dense_forward_batch_norm(
              n, s.in, s.out, x.g(), w.g(), bg, y.g(),
              BatchNormFinalize{static_cast<double>(n), kEpsilon, kDecay, mean.g(), invstd.g(),
                                running_mean.g(), running_var.g()},
              ws_gpu.data());
        });
        CHECK(counts.kernels == 1);
        CHECK(counts.copies == 0);
        CHECK(counts.host_syncs == 0);

        // y: the GPU's own dense_forward, bit for bit, where the inputs are too few to split
        // (in <= 128); split (the sums over `in` added in split order), the same bits on a
        // second run. The CPU's within the GEMM's tolerance either way.
        const std::vector<float> gpu_y = download(g, y.gpu);
        if (s.in <= 128) {
          auto y_plain = poisoned(g, v);
          g.dense_forward(n, s.in, s.out, x.g(), w.g(), bg, y_plain.g());
          check_same_bits(download(g, y_plain.gpu), gpu_y, "y against dense_forward");
        } else {
          auto y_again = poisoned(g, v);
          auto m_again = poisoned(g, s.out), is_again = poisoned(g, s.out);
          auto rm_again = upload(g, rm0), rv_again = upload(g, rv0);
          g.fused().dense_forward_batch_norm(
              n, s.in, s.out, x.g(), w.g(), bg, y_again.g(),
              BatchNormFinalize{static_cast<double>(n), kEpsilon, kDecay, m_again.g(), is_again.g(),
                                rm_again.g(), rv_again.g()},
              ws_gpu.data());
          check_same_bits(gpu_y, download(g, y_again.gpu), "y, run twice");
          check_same_bits(download(g, invstd.gpu), download(g, is_again.gpu), "invstd, run twice");
        }
        expect_close(g, y, 1e-5 * (s.in + 1), 1e-5, "y against the CPU chain");

        // The statistics: the CPU chain's of the GPU's y (the same float terms).
        mnist::DeviceBuffer<float> y_cpu(cpu(), v), sums(cpu(), 2 * s.out);
        cpu().copy_to_device(y_cpu.data(), gpu_y.data(), v * sizeof(float));
        auto m2 = upload(g, std::vector<float>(s.out)), is2 = upload(g, std::vector<float>(s.out));
        auto rm2 = upload(g, rm0), rv2 = upload(g, rv0);
        cpu().batch_norm_stats(mnist::ChannelGeom{n, s.out, 1}, y_cpu.data(), sums.data(),
                               sums.data() + s.out);
        cpu().batch_norm_finalize(s.out, static_cast<double>(n), sums.data(), sums.data() + s.out,
                                  kEpsilon, kDecay, m2.c(), is2.c(), rm2.c(), rv2.c());
        const double atol = 1e-9 * n;
        auto close = [&](const mnist::DeviceBuffer<float>& want,
                         const mnist::DeviceBuffer<float>& got, double rtol, const char* what) {
          const std::vector<float> a = download(cpu(), want), b2 = download(g, got);
          for (std::size_t i = 0; i < a.size(); ++i) {
            INFO(what << "[" << i << "]: cpu " << a[i] << ", gpu " << b2[i]);
            CHECK(std::abs(static_cast<double>(b2[i]) - a[i]) <= atol + rtol * std::abs(a[i]));
          }
        };
        close(m2.cpu, mean.gpu, 1e-6, "mean");
        close(is2.cpu, invstd.gpu, 1e-5, "invstd");
        close(rm2.cpu, running_mean.gpu, 1e-6, "running_mean");
        close(rv2.cpu, running_var.gpu, 1e-5, "running_var");
        // And against the CPU's own chain (its y from another GEMM order).
        expect_close(g, mean, 1e-5, 1e-4, "mean against the CPU chain");
        expect_close(g, invstd, 1e-5, 1e-3, "invstd against the CPU chain");
      }
    }
  }
}

TEST_CASE(
    "dense_block_softmax_cross_entropy: the head computes the dense block's output and the "
    "reduction of its backward",
    "[gpu][fused][dense_tail]") {
  Backend& g = gpu("fused");
  struct Shape {
    int c, k;
  };
  for (const Shape s : {Shape{100, 10}, Shape{1, 1}, Shape{7, 3}, Shape{128, 16}}) {
    REQUIRE(g.fused().supports(mnist::FusedShape::dense_tail(1, 1, s.c, s.k)));
    for (int n : {1, 7, 33, 257, 1000}) {
      if (n == 1000 && s.c != 100) continue;  // the head's grid of 8 groups: the seed's shape
      // 0: no dropout, beta only (the seed's batch norm); 1: dropout by value, gamma and beta;
      // 2: dropout from the step scalars (a captured step), neither.
      for (int variant = 0; variant < 3; ++variant) {
        INFO("c " << s.c << ", k " << s.k << ", n " << n << ", variant " << variant);
        const uint32_t seed = 100 * n + s.c + 13 * variant;
        const std::size_t v = static_cast<std::size_t>(n) * s.c;
        auto z = upload(g, random_floats(v, seed, -2.0f, 2.0f));
        auto mean = upload(g, random_floats(s.c, seed + 1, -0.3f, 0.3f));
        auto invstd = upload(g, random_floats(s.c, seed + 2, 0.5f, 1.5f));
        auto gamma = upload(g, random_floats(s.c, seed + 3, 0.5f, 1.5f));
        auto beta = upload(g, random_floats(s.c, seed + 4, -0.5f, 0.5f));
        auto w =
            upload(g, random_floats(static_cast<std::size_t>(s.k) * s.c, seed + 5, -0.5f, 0.5f));
        auto bias = upload(g, random_floats(s.k, seed + 6, -0.5f, 0.5f));
        auto labels = upload(g, random_ints(n, seed + 7, 0, s.k - 1));
        mnist::DeviceBuffer<StepScalars> scalars_c(cpu(), 1), scalars_g(g, 1);
        StepScalars sc;
        sc.step = variant == 2 ? 17 : 5;
        cpu().step_scalars_set(scalars_c.data(), sc);
        g.step_scalars_set(scalars_g.data(), sc);
        DenseBlockInput bc, bg;
        bc.x = z.c();
        bg.x = z.g();
        bc.mean = mean.c();
        bg.mean = mean.g();
        bc.invstd = invstd.c();
        bg.invstd = invstd.g();
        bc.beta = beta.c();
        bg.beta = beta.g();
        if (variant == 1) {
          bc.gamma = gamma.c();
          bg.gamma = gamma.g();
        }
        if (variant == 2) bc.beta = bg.beta = nullptr;
        if (variant > 0) {
          bc.has_dropout = bg.has_dropout = true;
          bc.dropout.rate = bg.dropout.rate = 0.5f;
          bc.dropout.key = bg.dropout.key = mnist::make_rng_key(42, 0x2000u + 12);
          bc.dropout.first_sample = bg.dropout.first_sample = 3;
          bc.dropout.step_scalars = scalars_c.data();
          bg.dropout.step_scalars = scalars_g.data();
        }
        auto dbn = poisoned(g, v);
        auto sum_dy = poisoned(g, s.c), sum_dy_xhat = poisoned(g, s.c);
        auto dw = poisoned(g, static_cast<std::size_t>(s.k) * s.c), db = poisoned(g, s.k);
        auto metrics = upload(g, std::vector<float>{1.0f, 2.0f, 3.0f});  // accumulated into
        auto ws_cpu = workspace(cpu(), n, 1, s.c, s.k);
        auto ws_gpu = workspace(g, n, 1, s.c, s.k);
        const float grad_scale = 1.0f / 64;
        cpu().fused().dense_block_softmax_cross_entropy(
            n, s.c, s.k, bc, w.c(), bias.c(), labels.c(), grad_scale, dbn.c(), sum_dy.c(),
            sum_dy_xhat.c(), dw.c(), db.c(), metrics.c(), ws_cpu.data());
        const mnist::LaunchCounts counts = counted(g, [&] {
          g.fused().dense_block_softmax_cross_entropy(
              n, s.c, s.k, bg, w.g(), bias.g(), labels.g(), grad_scale, dbn.g(), sum_dy.g(),
              sum_dy_xhat.g(), dw.g(), db.g(), metrics.g(), ws_gpu.data());
        });
        CHECK(counts.kernels == 1);
        CHECK(counts.copies == 0);
        CHECK(counts.host_syncs == 0);

        // The unfused head on the block's output as the CPU chain computes it.
        const mnist::DropoutArgs* drop = bc.has_dropout ? &bc.dropout : nullptr;
        const std::vector<float> a = cpu_only(
            download(cpu(), z.cpu),
            [&](const float* zin, float* out) {
              cpu().batch_norm_apply(mnist::ChannelGeom{n, s.c, 1}, zin, mean.c(), invstd.c(),
                                     bc.gamma, bc.beta, out);
              cpu().relu_forward(v, out, out);
              if (drop)
                cpu().dropout_forward(n, s.c, drop->rate, drop->key, drop->step_scalars,
                                      drop->first_sample, out, out);
            },
            v);
        auto a_gpu = upload(g, a);
        auto da = poisoned(g, v);
        auto dw_plain = poisoned(g, static_cast<std::size_t>(s.k) * s.c);
        auto db_plain = poisoned(g, s.k);
        auto metrics_plain = upload(g, std::vector<float>{1.0f, 2.0f, 3.0f});
        mnist::DeviceBuffer<float> ws_plain(
            g, std::max<std::size_t>(
                   1, g.fused().workspace_floats(mnist::FusedShape::dense_head(n, s.c, s.k))));
        g.fused().dense_softmax_cross_entropy(n, s.c, s.k, a_gpu.g(), w.g(), bias.g(), labels.g(),
                                              grad_scale, da.g(), dw_plain.g(), db_plain.g(),
                                              metrics_plain.g(), ws_plain.data());
        check_same_bits(download(g, dw_plain.gpu), download(g, dw.gpu), "dweight");
        check_same_bits(download(g, db_plain.gpu), download(g, db.gpu), "dbias");
        check_same_bits(download(g, metrics_plain.gpu), download(g, metrics.gpu), "metrics");
        // dbn: the CPU's dropout_backward and relu_backward of that head's dx.
        const std::vector<float> want_dbn = cpu_only(
            download(g, da.gpu),
            [&](const float* din, float* out) {
              const float* relu_dy = din;
              if (drop) {
                cpu().dropout_backward(n, s.c, drop->rate, drop->key, drop->step_scalars,
                                       drop->first_sample, din, out);
                relu_dy = out;
              }
              mnist::DeviceBuffer<float> relu(cpu(), v);
              cpu().batch_norm_apply(mnist::ChannelGeom{n, s.c, 1}, z.c(), mean.c(), invstd.c(),
                                     bc.gamma, bc.beta, relu.data());
              cpu().relu_forward(v, relu.data(), relu.data());
              cpu().relu_backward(v, relu.data(), relu_dy, out);
            },
            v);
        const std::vector<float> got_dbn = download(g, dbn.gpu);
        check_same_bits(want_dbn, got_dbn, "dbn");
        // The sums: the CPU's batch_norm_backward_reduce of the same dbn.
        auto dbn_cpu = upload(g, got_dbn);
        auto s1 = poisoned(g, s.c), s2 = poisoned(g, s.c);
        cpu().batch_norm_backward_reduce(mnist::ChannelGeom{n, s.c, 1}, dbn_cpu.c(), z.c(),
                                         mean.c(), invstd.c(), s1.c(), s2.c());
        const std::vector<float> want1 = download(cpu(), s1.cpu), want2 = download(cpu(), s2.cpu);
        const std::vector<float> got1 = download(g, sum_dy.gpu),
                                 got2 = download(g, sum_dy_xhat.gpu);
        for (int ch = 0; ch < s.c; ++ch) {
          INFO("channel " << ch << ": sum_dy cpu " << want1[ch] << " gpu " << got1[ch]
                          << ", sum_dy_xhat cpu " << want2[ch] << " gpu " << got2[ch]);
          CHECK(std::abs(static_cast<double>(got1[ch]) - want1[ch]) <=
                1e-9 * n + 1e-6 * std::abs(want1[ch]));
          CHECK(std::abs(static_cast<double>(got2[ch]) - want2[ch]) <=
                1e-9 * n + 1e-6 * std::abs(want2[ch]));
        }
        // And the whole CPU chain, within the head test's tolerances (test_fused_ops.cpp), the
        // gradients scaled by grad_scale.
        const double atol_sum = 2e-6 * n + 1e-5;
        expect_close(g, metrics, 1e-5 * n, 1e-5, "metrics against the CPU chain");
        expect_close(g, dw, atol_sum, 1e-4, "dweight against the CPU chain");
        expect_close(g, db, atol_sum, 1e-4, "dbias against the CPU chain");
        expect_close(g, dbn, 1e-5, 1e-4, "dbn against the CPU chain");
        expect_close(g, sum_dy, atol_sum, 1e-4, "sum_dy against the CPU chain");
        expect_close(g, sum_dy_xhat, atol_sum, 1e-4, "sum_dy_xhat against the CPU chain");

        // Bit-repeatable: the same call again.
        auto dw2 = poisoned(g, static_cast<std::size_t>(s.k) * s.c);
        auto sum2 = poisoned(g, s.c), sumx2 = poisoned(g, s.c);
        g.fused().dense_block_softmax_cross_entropy(n, s.c, s.k, bg, w.g(), bias.g(), labels.g(),
                                                    grad_scale, dbn.g(), sum2.g(), sumx2.g(),
                                                    dw2.g(), db.g(), metrics.g(), ws_gpu.data());
        check_same_bits(download(g, dw.gpu), download(g, dw2.gpu), "dweight, again");
        check_same_bits(got1, download(g, sum2.gpu), "sum_dy, again");
        check_same_bits(got2, download(g, sumx2.gpu), "sum_dy_xhat, again");
      }
    }
  }
}

TEST_CASE(
    "dense_backward_batch_norm: the dense layer's backward computes the batch norm's apply where "
    "it reads it",
    "[gpu][fused][dense_tail]") {
  Backend& g = gpu("fused");
  struct Shape {
    int in, out;
  };
  for (const Shape s : {Shape{588, 100}, Shape{1, 1}, Shape{65, 7}, Shape{33, 128}}) {
    for (int n : {1, 7, 33, 257, 1000}) {
      for (bool with_dx : {true, false}) {
        for (bool with_gamma : {false, true}) {
          if (n == 1000 && (s.in < 33 || with_gamma)) continue;  // the split's shapes, not all
          INFO("in " << s.in << ", out " << s.out << ", n " << n << (with_dx ? ", dx" : "")
                     << (with_gamma ? ", gamma" : ""));
          const uint32_t seed = 300 * n + s.out + (with_dx ? 1 : 0) + (with_gamma ? 2 : 0);
          const std::size_t v = static_cast<std::size_t>(n) * s.out;
          auto x = upload(g, random_floats(static_cast<std::size_t>(n) * s.in, seed, -1.0f, 1.0f));
          auto w = upload(
              g, random_floats(static_cast<std::size_t>(s.out) * s.in, seed + 1, -0.5f, 0.5f));
          auto dbn = upload(g, random_floats(v, seed + 2, -1.0f, 1.0f));
          auto z = upload(g, random_floats(v, seed + 3, -2.0f, 2.0f));
          auto mean = upload(g, random_floats(s.out, seed + 4, -0.3f, 0.3f));
          auto invstd = upload(g, random_floats(s.out, seed + 5, 0.5f, 1.5f));
          auto gamma = upload(g, random_floats(s.out, seed + 6, 0.5f, 1.5f));
          auto sums = upload(g, random_floats(s.out, seed + 7, -2.0f, 2.0f));
          auto sums_x = upload(g, random_floats(s.out, seed + 8, -2.0f, 2.0f));
          // The same gradient on either side: `at` picks a twin's CPU or GPU pointer.
          const auto gradient = [&](auto at) {
            return BatchNormGradient{at(dbn),
                                     at(z),
                                     at(mean),
                                     at(invstd),
                                     with_gamma ? at(gamma) : nullptr,
                                     at(sums),
                                     at(sums_x),
                                     static_cast<double>(n)};
          };
          const BatchNormGradient bc = gradient([](auto& t) { return t.c(); });
          const BatchNormGradient bg = gradient([](auto& t) { return t.g(); });
          auto dw = poisoned(g, static_cast<std::size_t>(s.out) * s.in);
          auto dx = poisoned(g, static_cast<std::size_t>(n) * s.in);
          auto ws_cpu = workspace(cpu(), n, s.in, s.out, 10);
          auto ws_gpu = workspace(g, n, s.in, s.out, 10);
          cpu().fused().dense_backward_batch_norm(n, s.in, s.out, x.c(), bc, w.c(), dw.c(), nullptr,
                                                  with_dx ? dx.c() : nullptr, ws_cpu.data());
          const mnist::LaunchCounts counts = counted(g, [&] {
            g.fused().dense_backward_batch_norm(n, s.in, s.out, x.g(), bg, w.g(), dw.g(), nullptr,
                                                with_dx ? dx.g() : nullptr, ws_gpu.data());
          });
          CHECK(counts.kernels == 1);
          CHECK(counts.copies == 0);

          // The GPU's own dense_backward of the CPU's apply: the same bits.
          const std::vector<float> dy = cpu_only(
              download(cpu(), dbn.cpu),
              [&](const float* d, float* out) {
                cpu().batch_norm_backward_apply(mnist::ChannelGeom{n, s.out, 1}, d, z.c(), mean.c(),
                                                invstd.c(), bc.gamma, sums.c(), sums_x.c(),
                                                static_cast<double>(n), out);
              },
              v);
          auto dy_gpu = upload(g, dy);
          auto dw_plain = poisoned(g, static_cast<std::size_t>(s.out) * s.in);
          auto dx_plain = poisoned(g, static_cast<std::size_t>(n) * s.in);
          g.fused().dense_backward(n, s.in, s.out, x.g(), dy_gpu.g(), w.g(), dw_plain.g(), nullptr,
                                   with_dx ? dx_plain.g() : nullptr);
          if (n <= 64) {
            check_same_bits(download(g, dw_plain.gpu), download(g, dw.gpu), "dweight");
          } else {
            auto dw_again = poisoned(g, static_cast<std::size_t>(s.out) * s.in);
            g.fused().dense_backward_batch_norm(n, s.in, s.out, x.g(), bg, w.g(), dw_again.g(),
                                                nullptr, with_dx ? dx.g() : nullptr, ws_gpu.data());
            check_same_bits(download(g, dw.gpu), download(g, dw_again.gpu), "dweight, run twice");
          }
          const std::vector<float> got_dx = download(g, dx.gpu);
          if (with_dx) {
            check_same_bits(download(g, dx_plain.gpu), got_dx, "dx");
            expect_close(g, dx, 1e-5 * s.out, 1e-5, "dx against the CPU chain");
          } else {
            CHECK(std::all_of(got_dx.begin(), got_dx.end(), [](float f) { return std::isnan(f); }));
          }
          // |dy| is at most ~10 here (k <= 1.5 * 1.5, terms <= 4): the GEMMs' tolerance scaled.
          expect_close(g, dw, 1e-5 * n, 1e-5, "dweight against the CPU chain");
        }
      }
    }
  }
}

TEST_CASE("the dense tail is the fused engine's, for the sizes its kernels take",
          "[gpu][fused][dense_tail]") {
  // A dense tail of c features and k classes, at batch 1 after a 256-wide layer.
  const auto tail = [](int c, int k) { return mnist::FusedShape::dense_tail(1, 256, c, k); };
  CHECK(gpu("fused").fused().supports(tail(100, 10)));
  CHECK(gpu("fused").fused().supports(tail(128, 16)));
  CHECK_FALSE(gpu("fused").fused().supports(tail(129, 10)));  // the head takes 128 inputs at most
  CHECK_FALSE(gpu("fused").fused().supports(tail(100, 17)));  // and 16 classes
  CHECK_FALSE(gpu("native").fused().supports(tail(100, 10)));
  CHECK_FALSE(cpu().fused().supports(tail(100, 10)));
}
