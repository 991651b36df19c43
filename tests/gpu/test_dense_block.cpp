// The fused dense block on the engine "fused" (batch_norm -> relu -> dropout over a dense layer's
// output and its backward, one kernel each, lib/backend/cuda/dense_block.cu) against its CPU twin,
// the chain of CPU ops in FusedKernels::dense_block_* (fused.cpp): op by op on awkward sizes with
// poisoned outputs, and whole replicas of the seed network.
//
// Tolerances, |gpu - cpu| <= atol + rtol * |cpu|:
// - the statistics (mean, invstd, running mean and variance) and the parameter gradients (dbeta,
//   dgamma): atol 1e-9 * n, rtol 4.8e-7. Both twins add the same double terms in different
//   orders (|x| <= 2 and |dy| <= 1 here, so the double sums differ by less than n^2 * 2^-53 * 8 <
//   1e-9 * n) and each rounds its sums to float once, so the floats differ by an ulp or two
//   (2^-23 = 1.2e-7 relative each); mean and invstd are one or two roundings further from them.
//   Measured on the emulated build: no difference at all on these inputs.
// - y and dx: bit for bit against the CPU chain run with the fused op's own statistics (mean and
//   invstd; dbeta and dgamma, which are the backward's sums): both evaluate the same float
//   expressions with each product and sum rounded on its own (the kernels write them with
//   __fmul_rn and kin, backend/cpu/batch_norm.cpp is compiled without FMA contraction). Against
//   the CPU chain's own outputs: atol 1e-6, rtol 1e-5, for the statistics may differ by an ulp.
// - the replicas (the seed network and others, 7 samples): gpu_support.hpp, expect_replica_close.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "gpu/gpu_support.hpp"
#include "support/synthetic.hpp"

using namespace gpu_test;
using mnist::Backend;
using mnist::DropoutArgs;
using mnist::StepScalars;

namespace {

constexpr float kEpsilon = 1e-3f, kDecay = 0.9f;

// A statistic or a parameter gradient: see the tolerances above.
void check_sum(Backend& g, const Twin<float>& out, int n, const std::string& what) {
  expect_close(g, out, 1e-9 * n, 4.8e-7, what);
}

bool all_nan(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return std::isnan(f); });
}

// The scratch the chain needs, on the CPU.
mnist::DeviceBuffer<float> cpu_scratch(int n, int c) {
  return mnist::DeviceBuffer<float>(
      cpu(), cpu().fused().workspace_floats(mnist::FusedShape::dense_block(n, c)));
}

// A dropout for both sides, its step in a StepScalars in each backend's memory.
struct Dropout {
  mnist::DeviceBuffer<StepScalars> cpu_scalars, gpu_scalars;
  DropoutArgs cpu_args, gpu_args;
  // Every dropout reads its step from the step's values in device memory; `later_step` picks
  // which step they hold.
  Dropout(Backend& g, float rate, bool later_step, uint32_t first_sample) {
    DropoutArgs a;
    a.rate = rate;
    a.key = mnist::make_rng_key(42, 0x2000u + 10);
    a.first_sample = first_sample;
    cpu_args = gpu_args = a;
    cpu_scalars = mnist::DeviceBuffer<StepScalars>(cpu(), 1);
    gpu_scalars = mnist::DeviceBuffer<StepScalars>(g, 1);
    StepScalars s;
    s.step = later_step ? 11 : 5;
    cpu().step_scalars_set(cpu_scalars.data(), s);
    g.step_scalars_set(gpu_scalars.data(), s);
    cpu_args.step_scalars = cpu_scalars.data();
    gpu_args.step_scalars = gpu_scalars.data();
  }
};

// The CPU chain's forward after the statistics, with given mean and invstd: what the fused
// forward's y must equal bit for bit.
std::vector<float> cpu_apply(int n, int c, const float* x, const std::vector<float>& mean,
                             const std::vector<float>& invstd, const float* gamma,
                             const float* beta, const DropoutArgs* dropout) {
  Backend& be = cpu();
  auto m = upload(be, mean), is = upload(be, invstd);
  mnist::DeviceBuffer<float> y(be, static_cast<std::size_t>(n) * c);
  be.batch_norm_apply(mnist::ChannelGeom{n, c, 1}, x, m.c(), is.c(), gamma, beta, y.data());
  be.relu_forward(y.size(), y.data(), y.data());
  if (dropout) {
    be.dropout_forward(n, c, dropout->rate, dropout->key, dropout->step_scalars,
                       dropout->first_sample, y.data(), y.data());
  }
  return download(be, y);
}

// The CPU chain's backward apply with given sums: what the fused backward's dx must equal.
std::vector<float> cpu_backward_apply(int n, int c, const float* x, const float* mean,
                                      const float* invstd, const float* gamma, const float* beta,
                                      const DropoutArgs* dropout, const float* dy,
                                      const std::vector<float>& sum_dy,
                                      const std::vector<float>& sum_dy_xhat) {
  Backend& be = cpu();
  const mnist::ChannelGeom g{n, c, 1};
  const std::size_t v = static_cast<std::size_t>(n) * c;
  mnist::DeviceBuffer<float> grad(be, v), relu(be, v), dx(be, v);
  const float* relu_dy = dy;
  if (dropout) {
    be.dropout_backward(n, c, dropout->rate, dropout->key, dropout->step_scalars,
                        dropout->first_sample, dy, grad.data());
    relu_dy = grad.data();
  }
  be.batch_norm_apply(g, x, mean, invstd, gamma, beta, relu.data());
  be.relu_forward(v, relu.data(), relu.data());
  be.relu_backward(v, relu.data(), relu_dy, grad.data());
  auto s1 = upload(be, sum_dy), s2 = upload(be, sum_dy_xhat);
  be.batch_norm_backward_apply(g, grad.data(), x, mean, invstd, gamma, s1.c(), s2.c(),
                               static_cast<double>(n), dx.data());
  return download(be, dx);
}

}  // namespace

TEST_CASE("the fused dense block matches the CPU chain", "[gpu][fused][dense_block]") {
  Backend& g = gpu("fused");
  REQUIRE(g.fused().supports(mnist::FusedShape::dense_block(1, 1)));
  for (int n : {1, 2, 7, 33, 257}) {
    for (int c : {1, 7, 100, 129}) {
      // Every variant on the small sizes; on the larger ones (slow to emulate) those that
      // change the kernels' path: dropout at two steps, with and without
      // the affine parameters.
      const bool small = n * c <= 700;
      for (int variant = 0; variant < 6; ++variant) {
        const bool dropout = variant % 3 != 0;
        const bool later_step = variant % 3 == 2;
        const bool affine = variant >= 3;  // gamma and beta; else neither (beta alone: the seed)
        if (!small && variant != 1 && variant != 5) continue;
        INFO("n " << n << ", c " << c << ", dropout " << dropout
                  << (later_step ? " (later step)" : "") << ", gamma and beta " << affine);
        const uint32_t seed = 100 * n + 10 * c + variant;
        const std::size_t v = static_cast<std::size_t>(n) * c;
        auto x = upload(g, random_floats(v, seed, -2.0f, 2.0f));
        auto gamma = upload(g, random_floats(c, seed + 1, 0.5f, 1.5f));
        auto beta = upload(g, random_floats(c, seed + 2, -0.5f, 0.5f));
        const std::vector<float> running_mean0 = random_floats(c, seed + 3, -0.5f, 0.5f);
        const std::vector<float> running_var0 = random_floats(c, seed + 4, 0.5f, 2.0f);
        auto running_mean = upload(g, running_mean0);
        auto running_var = upload(g, running_var0);
        auto dy = upload(g, random_floats(v, seed + 5, -1.0f, 1.0f));
        Dropout drop(g, 0.5f, later_step, 3);
        const DropoutArgs* dc = dropout ? &drop.cpu_args : nullptr;
        const DropoutArgs* dg = dropout ? &drop.gpu_args : nullptr;
        const float* gc = affine ? gamma.c() : nullptr;
        const float* gg = affine ? gamma.g() : nullptr;
        // Without gamma, beta alone (the seed network's batch norm) or neither.
        const float* bc = affine || variant == 1 ? beta.c() : nullptr;
        const float* bg = affine || variant == 1 ? beta.g() : nullptr;
        auto scratch = cpu_scratch(n, c);

        // ---- forward: poisoned outputs; the fused op needs no scratch (nullptr).
        auto y = poisoned(g, v);
        auto mean = poisoned(g, c);
        auto invstd = poisoned(g, c);
        cpu().fused().dense_block_forward(n, c, x.c(), kEpsilon, kDecay, gc, bc, dc, y.c(),
                                          mean.c(), invstd.c(), running_mean.c(), running_var.c(),
                                          scratch.data());
        const mnist::LaunchCounts fc = counted(g, [&] {
          g.fused().dense_block_forward(n, c, x.g(), kEpsilon, kDecay, gg, bg, dg, y.g(), mean.g(),
                                        invstd.g(), running_mean.g(), running_var.g(), nullptr);
        });
        CHECK(fc.kernels == 1);
        CHECK(fc.copies == 0);
        CHECK(fc.host_syncs == 0);
        check_sum(g, mean, n, "mean");
        check_sum(g, invstd, n, "invstd");
        check_sum(g, running_mean, n, "running_mean");
        check_sum(g, running_var, n, "running_var");
        const std::vector<float> gpu_y = download(g, y.gpu);
        CHECK(same_bits(gpu_y, cpu_apply(n, c, x.c(), download(g, mean.gpu),
                                         download(g, invstd.gpu), gc, bc, dc)));
        expect_close(g, y, 1e-6, 1e-5, "y against the CPU chain's");

        // The same bits again, from the same running statistics.
        {
          auto y2 = poisoned(g, v);
          auto mean2 = poisoned(g, c);
          auto invstd2 = poisoned(g, c);
          auto rm2 = upload(g, running_mean0);
          auto rv2 = upload(g, running_var0);
          g.fused().dense_block_forward(n, c, x.g(), kEpsilon, kDecay, gg, bg, dg, y2.g(),
                                        mean2.g(), invstd2.g(), rm2.g(), rv2.g(), nullptr);
          CHECK(same_bits(gpu_y, download(g, y2.gpu)));
          CHECK(same_bits(download(g, mean.gpu), download(g, mean2.gpu)));
          CHECK(same_bits(download(g, invstd.gpu), download(g, invstd2.gpu)));
          CHECK(same_bits(download(g, running_mean.gpu), download(g, rm2.gpu)));
          CHECK(same_bits(download(g, running_var.gpu), download(g, rv2.gpu)));
        }

        // ---- backward on identical inputs: the CPU's statistics on both sides.
        auto m = upload(g, download(cpu(), mean.cpu));
        auto is = upload(g, download(cpu(), invstd.cpu));
        for (int outputs = 0; outputs < 3; ++outputs) {
          // 0: dx, dgamma, dbeta; 1: dx alone; 2: dgamma, dbeta alone (dx nullptr).
          if (!small && outputs != 0) continue;
          INFO("outputs " << outputs);
          const bool want_dx = outputs != 2, want_sums = outputs != 1;
          auto dx = poisoned(g, v);
          auto dgamma = poisoned(g, c);
          auto dbeta = poisoned(g, c);
          cpu().fused().dense_block_backward(
              n, c, x.c(), m.c(), is.c(), gc, bc, dc, dy.c(), want_dx ? dx.c() : nullptr,
              want_sums ? dgamma.c() : nullptr, want_sums ? dbeta.c() : nullptr, scratch.data());
          const mnist::LaunchCounts bc_counts = counted(g, [&] {
            g.fused().dense_block_backward(
                n, c, x.g(), m.g(), is.g(), gg, bg, dg, dy.g(), want_dx ? dx.g() : nullptr,
                want_sums ? dgamma.g() : nullptr, want_sums ? dbeta.g() : nullptr, nullptr);
          });
          CHECK(bc_counts.kernels == 1);
          CHECK(bc_counts.copies == 0);
          CHECK(bc_counts.host_syncs == 0);
          if (want_sums) {
            check_sum(g, dbeta, n, "dbeta");
            check_sum(g, dgamma, n, "dgamma");
          } else {  // nullptr: nothing written
            CHECK(all_nan(download(g, dbeta.gpu)));
            CHECK(all_nan(download(g, dgamma.gpu)));
          }
          if (want_dx) {
            expect_close(g, dx, 1e-6, 1e-5, "dx against the CPU chain's");
            if (want_sums) {
              const std::vector<float> gpu_dx = download(g, dx.gpu);
              CHECK(same_bits(gpu_dx,
                              cpu_backward_apply(n, c, x.c(), m.c(), is.c(), gc, bc, dc, dy.c(),
                                                 download(g, dbeta.gpu), download(g, dgamma.gpu))));
              // The same bits again.
              auto dx2 = poisoned(g, v);
              auto dgamma2 = poisoned(g, c);
              auto dbeta2 = poisoned(g, c);
              g.fused().dense_block_backward(n, c, x.g(), m.g(), is.g(), gg, bg, dg, dy.g(),
                                             dx2.g(), dgamma2.g(), dbeta2.g(), nullptr);
              CHECK(same_bits(gpu_dx, download(g, dx2.gpu)));
              CHECK(same_bits(download(g, dgamma.gpu), download(g, dgamma2.gpu)));
              CHECK(same_bits(download(g, dbeta.gpu), download(g, dbeta2.gpu)));
            }
          } else {
            CHECK(all_nan(download(g, dx.gpu)));  // nullptr: nothing written
          }
        }
      }
    }
  }
}

TEST_CASE("a one-sample batch through the fused dense block does what the chain does",
          "[gpu][fused][dense_block]") {
  // With n = 1 each feature's mean is its one value, so x - mean = 0: the batch norm's output is
  // beta (x * a + b with b = beta - mean * a: beta up to the rounding of that sum), the variance is
  // 0 up to the rounding of x^2 (invstd ~ 1/sqrt(epsilon)), the running variance takes the biased
  // variance (count / (count - 1) is undefined), the gradient that reaches x is 0 and dgamma is 0.
  Backend& g = gpu("fused");
  const int n = 1, c = 5;
  auto x = upload(g, std::vector<float>{1.1f, -3.0f, 0.0f, 250.5f, -0.01f});
  auto beta = upload(g, std::vector<float>{0.25f, -0.25f, 0.5f, 0.0f, 1.0f});
  auto running_mean = upload(g, std::vector<float>(c, 0.0f));
  auto running_var = upload(g, std::vector<float>(c, 1.0f));
  auto dy = upload(g, std::vector<float>{0.5f, -1.0f, 2.0f, 0.125f, -0.75f});
  auto y = poisoned(g, c), mean = poisoned(g, c), invstd = poisoned(g, c);
  auto scratch = cpu_scratch(n, c);
  cpu().fused().dense_block_forward(n, c, x.c(), kEpsilon, kDecay, nullptr, beta.c(), nullptr,
                                    y.c(), mean.c(), invstd.c(), running_mean.c(), running_var.c(),
                                    scratch.data());
  g.fused().dense_block_forward(n, c, x.g(), kEpsilon, kDecay, nullptr, beta.g(), nullptr, y.g(),
                                mean.g(), invstd.g(), running_mean.g(), running_var.g(), nullptr);
  for (const auto* out : {&y, &mean, &invstd, &running_mean, &running_var})
    check_same_bits(g, *out, "n = 1 forward");
  const std::vector<float> yc = download(cpu(), y.cpu), bv = download(cpu(), beta.cpu);
  const std::vector<float> is = download(cpu(), invstd.cpu);
  for (int f = 0; f < c; ++f) {
    INFO("feature " << f);
    CHECK(std::abs(yc[f] - std::max(bv[f], 0.0f)) <= 1e-6f * std::abs(bv[f]) + 1e-4f);
    // The variance is at most half an ulp of x^2 (here < 1e-7), next to epsilon = 1e-3.
    CHECK(std::abs(is[f] * std::sqrt(kEpsilon) - 1.0f) <= 1e-4f);
  }
  auto dx = poisoned(g, c), dgamma = poisoned(g, c), dbeta = poisoned(g, c);
  cpu().fused().dense_block_backward(n, c, x.c(), mean.c(), invstd.c(), nullptr, beta.c(), nullptr,
                                     dy.c(), dx.c(), dgamma.c(), dbeta.c(), scratch.data());
  auto mg = upload(g, download(cpu(), mean.cpu)), ig = upload(g, download(cpu(), invstd.cpu));
  g.fused().dense_block_backward(n, c, x.g(), mg.g(), ig.g(), nullptr, beta.g(), nullptr, dy.g(),
                                 dx.g(), dgamma.g(), dbeta.g(), nullptr);
  for (const auto* out : {&dx, &dgamma, &dbeta}) check_same_bits(g, *out, "n = 1 backward");
  const std::vector<float> dxc = download(cpu(), dx.cpu), dgc = download(cpu(), dgamma.cpu);
  const std::vector<float> dbc = download(cpu(), dbeta.cpu), dyv = download(cpu(), dy.cpu);
  for (int f = 0; f < c; ++f) {
    INFO("feature " << f);
    CHECK(dxc[f] == 0.0f);
    CHECK(dgc[f] == 0.0f);
    CHECK(dbc[f] == (yc[f] > 0.0f ? dyv[f] : 0.0f));  // the ReLU passes beta's sign
  }
}

TEST_CASE("the fused dense block carries NaN and infinities where the CPU chain does",
          "[gpu][fused][dense_block]") {
  Backend& g = gpu("fused");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const int n = 7, c = 5;
  // Feature 0 holds a NaN, 1 +inf, 2 -inf, 3 finite (its dy holds a NaN), 4 finite.
  std::vector<float> xs = random_floats(n * c, 9, -2.0f, 2.0f);
  xs[1 * c + 0] = nan;
  xs[2 * c + 1] = inf;
  xs[4 * c + 2] = -inf;
  std::vector<float> dys = random_floats(n * c, 10, -1.0f, 1.0f);
  dys[3 * c + 3] = nan;
  auto x = upload(g, xs), dy = upload(g, dys);
  auto beta = upload(g, random_floats(c, 11, -0.5f, 0.5f));
  auto running_mean = upload(g, std::vector<float>(c, 0.0f));
  auto running_var = upload(g, std::vector<float>(c, 1.0f));
  Dropout drop(g, 0.5f, false, 0);
  auto y = poisoned(g, n * c), mean = poisoned(g, c), invstd = poisoned(g, c);
  auto scratch = cpu_scratch(n, c);
  cpu().fused().dense_block_forward(n, c, x.c(), kEpsilon, kDecay, nullptr, beta.c(),
                                    &drop.cpu_args, y.c(), mean.c(), invstd.c(), running_mean.c(),
                                    running_var.c(), scratch.data());
  g.fused().dense_block_forward(n, c, x.g(), kEpsilon, kDecay, nullptr, beta.g(), &drop.gpu_args,
                                y.g(), mean.g(), invstd.g(), running_mean.g(), running_var.g(),
                                nullptr);
  auto dx = poisoned(g, n * c), dgamma = poisoned(g, c), dbeta = poisoned(g, c);
  auto mg = upload(g, download(cpu(), mean.cpu)), ig = upload(g, download(cpu(), invstd.cpu));
  cpu().fused().dense_block_backward(n, c, x.c(), mean.c(), invstd.c(), nullptr, beta.c(),
                                     &drop.cpu_args, dy.c(), dx.c(), dgamma.c(), dbeta.c(),
                                     scratch.data());
  g.fused().dense_block_backward(n, c, x.g(), mg.g(), ig.g(), nullptr, beta.g(), &drop.gpu_args,
                                 dy.g(), dx.g(), dgamma.g(), dbeta.g(), nullptr);
  struct Out {
    const Twin<float>* twin;
    const char* what;
  };
  for (const Out& o : {Out{&y, "y"}, Out{&mean, "mean"}, Out{&invstd, "invstd"},
                       Out{&running_mean, "running_mean"}, Out{&running_var, "running_var"},
                       Out{&dx, "dx"}, Out{&dgamma, "dgamma"}, Out{&dbeta, "dbeta"}}) {
    const std::vector<float> want = download(cpu(), o.twin->cpu), got = download(g, o.twin->gpu);
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO(o.what << "[" << i << "]: cpu " << want[i] << ", gpu " << got[i]);
      // NaN's bits may differ (a GPU makes its own NaN), being NaN may not.
      CHECK(std::isnan(want[i]) == std::isnan(got[i]));
      if (!std::isnan(want[i])) CHECK(want[i] == got[i]);
    }
  }
  // The features that saw a NaN or an infinity are NaN through the statistics; the others not.
  const std::vector<float> mc = download(cpu(), mean.cpu), ic = download(cpu(), invstd.cpu);
  CHECK(std::isnan(mc[0]));
  CHECK(std::isinf(mc[1]));
  CHECK(std::isnan(ic[1]));
  CHECK(std::isinf(mc[2]));
  CHECK(std::isfinite(mc[3]));
  CHECK(std::isfinite(ic[4]));
}

TEST_CASE("only the fused engine fuses the dense block, the others run the chain",
          "[gpu][fused][dense_block]") {
  Backend& fused = gpu("fused");
  Backend& native = gpu("native");
  CHECK(fused.fused().supports(mnist::FusedShape::dense_block(1, 1)));
  CHECK_FALSE(native.fused().supports(mnist::FusedShape::dense_block(1, 1)));
  CHECK_FALSE(cpu().fused().supports(mnist::FusedShape::dense_block(1, 1)));
  // On native the call is the chain of separate kernels, with the CPU chain's results.
  const int n = 33, c = 7;
  const std::size_t v = static_cast<std::size_t>(n) * c;
  auto x = upload(native, random_floats(v, 5, -2.0f, 2.0f));
  auto beta = upload(native, random_floats(c, 6, -0.5f, 0.5f));
  auto rm = upload(native, std::vector<float>(c, 0.0f));
  auto rv = upload(native, std::vector<float>(c, 1.0f));
  auto y = poisoned(native, v), mean = poisoned(native, c), invstd = poisoned(native, c);
  auto scratch = cpu_scratch(n, c);
  mnist::DeviceBuffer<float> native_scratch(
      native, cpu().fused().workspace_floats(mnist::FusedShape::dense_block(n, c)));
  Dropout drop(native, 0.5f, false, 0);
  cpu().fused().dense_block_forward(n, c, x.c(), kEpsilon, kDecay, nullptr, beta.c(),
                                    &drop.cpu_args, y.c(), mean.c(), invstd.c(), rm.c(), rv.c(),
                                    scratch.data());
  const mnist::LaunchCounts counts = counted(native, [&] {
    native.fused().dense_block_forward(n, c, x.g(), kEpsilon, kDecay, nullptr, beta.g(),
                                       &drop.gpu_args, y.g(), mean.g(), invstd.g(), rm.g(), rv.g(),
                                       native_scratch.data());
  });
  CHECK(counts.kernels > 1);
  // The native kernels are the GPU reference, not the CPU's bit-for-bit twins: the batch-norm
  // tolerance of test_cuda_layers.cpp.
  expect_close(native, y, 1e-5, 1e-5, "native chain y");
  expect_close(native, mean, 1e-6, 1e-5, "native chain mean");

  // Arguments outside the contract are refused, naming the value.
  mnist::DeviceBuffer<float> fx(fused, v), fy(fused, v), fc(fused, c);
  CHECK_THROWS_WITH(fused.fused().dense_block_forward(0, c, fx.data(), kEpsilon, kDecay, nullptr,
                                                      nullptr, nullptr, fy.data(), fc.data(),
                                                      fc.data(), fc.data(), fc.data(), nullptr),
                    Catch::Contains("n >= 1") && Catch::Contains("got n 0"));
  DropoutArgs bad;
  bad.rate = 1.0f;
  CHECK_THROWS_WITH(
      fused.fused().dense_block_backward(n, c, fx.data(), fc.data(), fc.data(), nullptr, nullptr,
                                         &bad, fy.data(), fx.data(), nullptr, nullptr, nullptr),
      Catch::Contains("dropout rate 1 is outside [0, 1)"));
}

TEST_CASE(
    "a seed-network replica on the fused engine runs its dense block fused and matches the CPU, "
    "with local and with sync batch norm",
    "[gpu][fused][dense_block]") {
  const bool sync = GENERATE(false, true);
  CAPTURE(sync);
  const std::string yaml = mnist::testing::seed_network_yaml();
  const ReplicaRun want = run_replica(cpu(), yaml, sync);
  const ReplicaRun got = run_replica(gpu("fused"), yaml, sync);
  // conv blocks, flatten, dense, the dense block (batch_norm -> relu -> dropout), the head.
  CHECK(got.labels == std::vector<std::string>{
                          "0:conv2d+batch_norm+relu+max_pool", "4:conv2d+batch_norm+relu+max_pool",
                          "8:flatten", "9:dense", "10:batch_norm+relu+dropout", "13:dense"});
  // The CPU backend runs them as separate layers.
  CHECK(want.labels.size() == got.labels.size() + 2);
  // Sync batch norm: the same all-reduces on both sides, two per batch norm (its statistics, its
  // gradient sums).
  CHECK(want.all_reduces == (sync ? 6 : 0));
  expect_replica_close(want, got);
}

TEST_CASE(
    "dense blocks without a dropout, before a dropout of rate 0, with gamma and first in the "
    "network match the CPU",
    "[gpu][fused][dense_block]") {
  // Block 1 follows the flatten of the input (its input gradient is never needed: dx nullptr),
  // block 4 has no dropout after it, block 7 a dropout of rate 0 (the identity); every batch norm
  // learns gamma and beta.
  const std::string yaml = R"(
name: dense-blocks
seed: 5
data: {dataset: custom, dir: unused}
model:
  input: [1, 5, 5]
  classes: 10
  init: {type: truncated_normal, stddev: 0.1}
  batch_norm: {decay: 0.9, epsilon: 0.001, center: true, scale: true}
  layers:
    - flatten: {}
    - batch_norm: {}
    - relu: {}
    - dense: {units: 9, batchnorm: true, activation: relu}
    - dense: {units: 13, batchnorm: true, activation: relu}
    - dropout: {rate: 0.0}
    - dense: {units: 10}
devices: {backend: cpu}
train: {steps: 1, global_batch: 7}
optimizer: {type: adam, lr: 0.001}
)";
  const bool sync = GENERATE(false, true);
  CAPTURE(sync);
  const ReplicaRun want = run_replica(cpu(), yaml, sync);
  const ReplicaRun got = run_replica(gpu("fused"), yaml, sync);
  CHECK(got.labels == std::vector<std::string>{"0:flatten", "1:batch_norm+relu", "3:dense",
                                               "4:batch_norm+relu", "6:dense",
                                               "7:batch_norm+relu+dropout", "10:dense"});
  // Block 1's gradient sums are not all-reduced (nobody needs its input gradient), as
  // BatchNormLayer does.
  CHECK(want.all_reduces == (sync ? 5 : 0));
  expect_replica_close(want, got);
}
