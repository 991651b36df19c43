// The native engine's fused batch norm -> ReLU -> 2x2 max pool block against the separate
// kernels it replaces (the double oracle of backend/cpu), and a whole replica fused vs unfused.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "backend/backend.hpp"
#include "backend/cpu/batch_norm.hpp"
#include "backend/cpu/max_pool.hpp"
#include "backend/cpu/native/conv_block.hpp"
#include "backend/cpu/relu.hpp"
#include "model/model.hpp"
#include "model/replica.hpp"
#include "support/gradcheck.hpp"
#include "support/pool_geom.hpp"
#include "support/synthetic.hpp"

using namespace mnist;
using namespace mnist::test;

namespace {

using mnist::testing::block_geom;

}  // namespace

TEST_CASE("fused bn-relu-pool equals batch_norm_apply, relu and max_pool, forward and backward",
          "[cpu]") {
  // Odd sizes (the last row and column are dropped by the pooling), with and without gamma.
  for (const PoolGeom& g : {block_geom(3, 2, 7, 9), block_geom(2, 6, 28, 28)}) {
    for (bool with_gamma : {false, true}) {
      for (int threads : {1, 3}) {
        INFO("h " << g.h << ", gamma " << with_gamma << ", threads " << threads);
        const ChannelGeom cg{g.n, g.c, g.h * g.w};
        const std::size_t full = std::size_t(g.n) * g.c * g.h * g.w;
        const std::size_t pooled = std::size_t(g.n) * g.c * g.out_h * g.out_w;
        const auto x = random_values(full, 5, -2, 2), dy = random_values(pooled, 6, -1, 1);
        const auto mean = random_values(g.c, 7, -0.3, 0.3), invstd = random_values(g.c, 8, 0.5, 2);
        const auto gamma = random_values(g.c, 9, 0.5, 1.5),
                   beta = random_values(g.c, 10, -0.5, 0.5);
        const double* gp = with_gamma ? gamma.data() : nullptr;
        const auto sums = random_values(2 * g.c, 11, -3, 3);  // as if all-reduced
        const double count = 1.5 * g.n * g.h * g.w;

        // The separate kernels.
        std::vector<double> bn(full), act(full), y(pooled), dact(full), dbn(full), dx(full);
        std::vector<int32_t> argmax(pooled);
        std::vector<double> sum_dy(g.c), sum_dy_xhat(g.c);
        cpu::batch_norm_apply(cg, x.data(), mean.data(), invstd.data(), gp, beta.data(), bn.data(),
                              1);
        cpu::relu_forward(full, bn.data(), act.data(), 1);
        cpu::max_pool_forward(g, act.data(), y.data(), argmax.data(), 1);
        cpu::max_pool_backward(g, dy.data(), argmax.data(), dact.data(), 1);
        cpu::relu_backward(full, act.data(), dact.data(), dbn.data(), 1);
        cpu::batch_norm_backward_reduce(cg, dbn.data(), x.data(), mean.data(), invstd.data(),
                                        sum_dy.data(), sum_dy_xhat.data(), 1);
        cpu::batch_norm_backward_apply(cg, dbn.data(), x.data(), mean.data(), invstd.data(), gp,
                                       sums.data(), sums.data() + g.c, count, dx.data(), 1);

        // The fused block.
        auto fy = poisoned<double>(pooled), fdx = poisoned<double>(full);
        auto fsum_dy = poisoned<double>(g.c), fsum_dy_xhat = poisoned<double>(g.c);
        std::vector<uint8_t> mask(pooled, 0xff);
        cpu::native::bn_relu_pool_forward(g, x.data(), mean.data(), invstd.data(), gp, beta.data(),
                                          fy.data(), mask.data(), threads);
        cpu::native::bn_relu_pool_backward_reduce(g, dy.data(), mask.data(), x.data(), mean.data(),
                                                  invstd.data(), fsum_dy.data(),
                                                  fsum_dy_xhat.data(), threads);
        cpu::native::bn_relu_pool_backward_apply(g, dy.data(), mask.data(), x.data(), mean.data(),
                                                 invstd.data(), gp, sums.data(), sums.data() + g.c,
                                                 count, fdx.data(), threads);
        // The same expressions in the same order: equal, bit for bit.
        check_close(fy, y, 0, 0, "y");
        check_close(fdx, dx, 0, 0, "dx");
        // Sums over the winners only, vs over every element (zeros included): rounding apart.
        check_close(fsum_dy, sum_dy, 1e-12, 1e-12, "sum_dy");
        check_close(fsum_dy_xhat, sum_dy_xhat, 1e-12, 1e-12, "sum_dy_xhat");
        // The mask names the winner and whether it passed the ReLU.
        for (std::size_t i = 0; i < pooled; ++i) {
          const std::size_t plane = i / (g.out_h * g.out_w), o = i % (g.out_h * g.out_w);
          const int oy = static_cast<int>(o) / g.out_w, ox = static_cast<int>(o) % g.out_w;
          const int at = (mask[i] & cpu::native::kWinnerMask);
          const int flat = (2 * oy + at / 2) * g.w + 2 * ox + at % 2;
          if (y[i] > 0) CHECK(flat == argmax[i]);
          CHECK(bool(mask[i] & cpu::native::kPassedRelu) == (y[i] > 0));
          (void)plane;
        }
      }
    }
  }
}

TEST_CASE("fused block: all-negative windows pass nothing, and NaN stays visible", "[cpu]") {
  const PoolGeom g = block_geom(1, 1, 2, 4);
  const std::vector<double> x = {-1, -2, 3, 5, -3, -4, 5, NAN}, mean = {0}, invstd = {1};
  std::vector<double> y(2);
  std::vector<uint8_t> mask(2);
  cpu::native::bn_relu_pool_forward(g, x.data(), mean.data(), invstd.data(),
                                    static_cast<const double*>(nullptr),
                                    static_cast<const double*>(nullptr), y.data(), mask.data(), 1);
  CHECK(y[0] == 0);
  CHECK(mask[0] == 0);  // first element wins, and the ReLU stops its gradient
  CHECK(y[1] == 5);     // ties: the first in row-major order
  CHECK(mask[1] == (1 | cpu::native::kPassedRelu));
}

TEST_CASE("a replica with fused conv blocks computes what the separate layers compute", "[cpu]") {
  const std::vector<Engine> engines = cpu_engines();
  if (engines.size() < 2) {
    // Only native in this build: nothing unfused to compare with (the kernel tests above still
    // compare the fused kernels with the separate ones). Said, not silently passed.
    WARN("no blas engine in this build: fused-vs-separate replica comparison not run");
    return;
  }
  const Experiment e = parse_experiment(testing::seed_network_yaml(), "seed.yaml");
  const Model model = Model::build(e.model);
  const int n = 8;
  std::vector<std::vector<float>> grads, logits;
  std::vector<float> metrics[2];
  for (const Engine engine : {Engine::native, Engine::blas}) {
    BackendOptions o;
    o.threads = 2;
    o.engine = engine;
    const auto be = make_cpu_backend(o);
    Replica r(model, *be, n);
    CHECK(r.layers().size() ==
          (engine == Engine::native ? model.layers().size() - 6 : model.layers().size()));
    const auto params = model.initial_params(3);
    const auto state = model.initial_state();
    be->copy_to_device(r.params(), params.data(), params.size() * sizeof(float));
    be->copy_to_device(r.state(), state.data(), state.size() * sizeof(float));
    const auto x = cast_to<float>(random_values(n * model.input().size(), 4, 0, 1));
    be->copy_to_device(r.input(), x.data(), x.size() * sizeof(float));
    for (int i = 0; i < n; ++i) r.labels()[i] = i % 10;
    StepScalars step_values;  // step 0 (the CPU backend's memory is the host's)
    PassContext ctx;
    ctx.n = n;
    ctx.global_n = n;
    ctx.seed = 3;
    ctx.step_scalars = &step_values;
    r.reset_metrics();
    r.forward_train(ctx, 1.0f / n);
    r.backward(ctx);
    grads.emplace_back(r.grads(), r.grads() + model.param_count());
    metrics[grads.size() - 1].assign(r.metrics(), r.metrics() + kMetricSlots);
    std::vector<float> running(r.state(), r.state() + model.state_count());
    logits.push_back(running);
  }
  check_close(grads[0], grads[1], 1e-6, 1e-3, "gradients, fused vs separate layers");
  check_close(logits[0], logits[1], 1e-6, 1e-5, "running statistics");
  CHECK(metrics[0][kLossSum] == Approx(metrics[1][kLossSum]).epsilon(1e-5));
}
