// CPU kernels: finite-difference gradient checks in double, poisoned outputs, float vs double,
// optimizers against hand-computed values, dropout masks and loss metrics.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "backend/cpu/batch_norm.hpp"
#include "backend/cpu/conv2d.hpp"
#include "backend/cpu/dense.hpp"
#include "backend/cpu/dropout.hpp"
#include "backend/cpu/elementwise.hpp"
#include "backend/cpu/gather_batch.hpp"
#include "backend/cpu/gemm.hpp"
#include "backend/cpu/max_pool.hpp"
#include "backend/cpu/native/isa.hpp"
#include "backend/cpu/optimizer.hpp"
#include "backend/cpu/relu.hpp"
#include "backend/cpu/softmax_cross_entropy.hpp"
#include "core/error.hpp"
#include "support/gradcheck.hpp"

using namespace mnist;
using namespace mnist::test;

namespace {

Conv2dGeom conv_geom(int n, int c, int h, int w, int k, int kh, int kw, int sh, int sw, int ph,
                     int pw) {
  Conv2dGeom g;
  g.n = n, g.c = c, g.h = h, g.w = w, g.k = k, g.kh = kh, g.kw = kw;
  g.stride_h = sh, g.stride_w = sw, g.pad_h = ph, g.pad_w = pw;
  g.out_h = (h + 2 * ph - kh) / sh + 1;
  g.out_w = (w + 2 * pw - kw) / sw + 1;
  return g;
}

PoolGeom pool_geom(int n, int c, int h, int w, int sh_, int sw_, int st_h, int st_w, int ph,
                   int pw) {
  PoolGeom g;
  g.n = n, g.c = c, g.h = h, g.w = w, g.size_h = sh_, g.size_w = sw_;
  g.stride_h = st_h, g.stride_w = st_w, g.pad_h = ph, g.pad_w = pw;
  g.out_h = (h + 2 * ph - sh_) / st_h + 1;
  g.out_w = (w + 2 * pw - sw_) / st_w + 1;
  return g;
}

std::size_t x_size(const Conv2dGeom& g) {
  return std::size_t(g.n) * g.c * g.h * g.w;
}
std::size_t y_size(const Conv2dGeom& g) {
  return std::size_t(g.n) * g.k * g.out_h * g.out_w;
}
std::size_t w_size(const Conv2dGeom& g) {
  return std::size_t(g.k) * g.c * g.kh * g.kw;
}

// Naive row-major reference for op(A) * op(B).
std::vector<double> naive_product(bool ta, bool tb, int m, int n, int k,
                                  const std::vector<double>& a, int lda,
                                  const std::vector<double>& b, int ldb) {
  std::vector<double> c(std::size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p)
        c[i * n + j] +=
            (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
  return c;
}

}  // namespace

// ---- gemm -------------------------------------------------------------------------------------

TEST_CASE("gemm matches a naive product for every transpose, with padded strides", "[cpu]") {
  const int m = 7, n = 5, k = 9;
  for (int variant = 0; variant < 8; ++variant) {
    const bool ta = variant & 1, tb = variant & 2, portable = variant & 4;
    // Stored shapes with two spare columns, so the leading dimensions are honoured.
    const int lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 2, ldc = n + 3;
    auto a = random_values(std::size_t(ta ? k : m) * lda, 10 + variant, -1, 1);
    auto b = random_values(std::size_t(tb ? n : k) * ldb, 20 + variant, -1, 1);
    const auto ref = naive_product(ta, tb, m, n, k, a, lda, b, ldb);
    INFO("trans_a " << ta << " trans_b " << tb << " portable " << portable);
    // beta = 0 assigns: NaN in C must not leak through.
    std::vector<double> c(std::size_t(m) * ldc, std::numeric_limits<double>::quiet_NaN());
    auto run = portable ? cpu::gemm_portable<double> : cpu::gemm<double>;
    run(ta, tb, m, n, k, 2.0, a.data(), lda, b.data(), ldb, 0.0, c.data(), ldc);
    std::vector<double> got, want;
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) got.push_back(c[i * ldc + j]), want.push_back(2 * ref[i * n + j]);
    check_close(got, want, 1e-12, 1e-12, "C = 2 op(A) op(B)");
    // beta = 1 accumulates onto what is there; the padding columns of C stay untouched.
    run(ta, tb, m, n, k, 1.0, a.data(), lda, b.data(), ldb, 1.0, c.data(), ldc);
    got.clear();
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        got.push_back(c[i * ldc + j]), want[i * n + j] = 3 * ref[i * n + j];
    check_close(got, want, 1e-12, 1e-12, "C += op(A) op(B)");
    CHECK(std::isnan(c[n]));
  }
}

// ---- conv2d -----------------------------------------------------------------------------------

namespace {

// One implementation of the conv2d contract in double: the im2col + GEMM kernels of backend/cpu
// (the oracle, which the blas engine runs) or the native engine's direct kernels, compiled for
// one instruction set.
struct ConvImpl {
  std::string name;
  std::size_t (*workspace)(const Conv2dGeom&, int);
  void (*forward)(const Conv2dGeom&, const double*, const double*, const double*, double*, double*,
                  int);
  void (*backward_data)(const Conv2dGeom&, const double*, const double*, double*, double*, int);
  void (*backward_weights)(const Conv2dGeom&, const double*, const double*, double*, double*,
                           double*, int);
  bool (*supports)(const Conv2dGeom&);
};

bool any_geometry(const Conv2dGeom&) {
  return true;
}

std::vector<ConvImpl> conv_impls() {
  std::vector<ConvImpl> impls = {{"im2col+gemm", &cpu::conv2d_workspace_floats,
                                  &cpu::conv2d_forward<double>, &cpu::conv2d_backward_data<double>,
                                  &cpu::conv2d_backward_weights<double>, &any_geometry}};
  for (cpu::native::Isa isa : cpu::native::supported_isas()) {
    const auto k = cpu::native::direct_conv_kernels<double>(isa);
    impls.push_back({std::string("direct ") + cpu::native::isa_name(isa), k.workspace, k.forward,
                     k.backward_data, k.backward_weights, &cpu::native::direct_conv_supports});
  }
  return impls;
}

void check_conv2d_gradients(const ConvImpl& impl, const Conv2dGeom& g, int threads, uint64_t seed) {
  auto x = random_values(x_size(g), seed, -1, 1);
  auto w = random_values(w_size(g), seed + 1, -1, 1);
  auto b = random_values(g.k, seed + 2, -1, 1);
  const auto r = random_values(y_size(g), seed + 3, -1, 1);  // dL/dy of L = sum(y * r)
  std::vector<double> work(impl.workspace(g, threads));
  const auto poison_work = [&] {
    std::fill(work.begin(), work.end(), std::numeric_limits<double>::quiet_NaN());
  };
  const auto loss = [&] {
    auto y = poisoned<double>(y_size(g));
    poison_work();
    impl.forward(g, x.data(), w.data(), b.data(), y.data(), work.data(), threads);
    return dot(y, r);
  };
  auto dx = poisoned<double>(x_size(g));
  poison_work();
  impl.backward_data(g, r.data(), w.data(), dx.data(), work.data(), threads);
  check_gradient(dx, numeric_gradient(x, loss), "conv2d dx");

  auto dw = poisoned<double>(w_size(g));
  auto db = poisoned<double>(g.k);
  poison_work();
  impl.backward_weights(g, x.data(), r.data(), dw.data(), db.data(), work.data(), threads);
  check_gradient(dw, numeric_gradient(w, loss), "conv2d dweight");
  check_gradient(db, numeric_gradient(b, loss), "conv2d dbias");

  // Without a bias gradient the weight gradient is unchanged.
  auto dw2 = poisoned<double>(w_size(g));
  poison_work();
  impl.backward_weights(g, x.data(), r.data(), dw2.data(), static_cast<double*>(nullptr),
                        work.data(), threads);
  check_close(dw2, dw, 0, 0, "conv2d dweight without dbias");
}

}  // namespace

TEST_CASE("conv2d backward matches finite differences (strides, padding, odd sizes)", "[cpu]") {
  const Conv2dGeom geoms[] = {
      conv_geom(2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1),    // "same" 3x3, odd sizes
      conv_geom(3, 2, 9, 8, 3, 5, 4, 2, 2, 2, 1),    // strided, non-square kernel
      conv_geom(1, 1, 5, 7, 2, 2, 3, 1, 2, 2, 0),    // first output row reads only padding
      conv_geom(2, 2, 6, 5, 5, 1, 1, 1, 1, 0, 0),    // 1x1
      conv_geom(2, 1, 12, 12, 3, 5, 5, 1, 1, 2, 2),  // the seed's first layer, small
      conv_geom(2, 8, 6, 7, 13, 3, 2, 1, 1, 0, 1),   // channels past one register block
      conv_geom(1, 2, 9, 11, 7, 4, 5, 1, 1, 3, 4),   // padding up to kernel - 1, wider than tall
  };
  for (const ConvImpl& impl : conv_impls()) {
    int index = 0;
    for (const auto& g : geoms) {
      if (impl.supports(g)) {
        for (int threads : {1, 2, 3}) {
          INFO(impl.name << ", geometry " << index << ", threads " << threads);
          check_conv2d_gradients(impl, g, threads, 100 + 10 * index);
        }
      }
      ++index;
    }
  }
}

TEST_CASE("conv2d in float agrees with double on the seed's second layer", "[cpu]") {
  const Conv2dGeom g = conv_geom(4, 6, 14, 14, 12, 5, 5, 1, 1, 2, 2);
  const auto x = random_values(x_size(g), 1, -1, 1), w = random_values(w_size(g), 2, -0.3, 0.3);
  const auto b = random_values(g.k, 3, -1, 1), dy = random_values(y_size(g), 4, -1, 1);
  // The double oracle: im2col + GEMM.
  std::vector<double> wd(cpu::conv2d_workspace_floats(g, 2));
  std::vector<double> y(y_size(g)), dx(x_size(g)), dw(w_size(g)), db(g.k);
  cpu::conv2d_forward(g, x.data(), w.data(), b.data(), y.data(), wd.data(), 2);
  cpu::conv2d_backward_data(g, dy.data(), w.data(), dx.data(), wd.data(), 2);
  cpu::conv2d_backward_weights(g, x.data(), dy.data(), dw.data(), db.data(), wd.data(), 2);
  const auto xf = cast_to<float>(x), wtf = cast_to<float>(w), bf = cast_to<float>(b),
             dyf = cast_to<float>(dy);
  const auto check = [&](const std::string& name, auto workspace, auto forward, auto backward_data,
                         auto backward_weights) {
    INFO(name);
    std::vector<float> wf(workspace(g, 2), NAN);
    std::vector<float> yf(y.size(), NAN), dxf(dx.size(), NAN), dwf(dw.size(), NAN),
        dbf(db.size(), NAN);
    forward(g, xf.data(), wtf.data(), bf.data(), yf.data(), wf.data(), 2);
    backward_data(g, dyf.data(), wtf.data(), dxf.data(), wf.data(), 2);
    backward_weights(g, xf.data(), dyf.data(), dwf.data(), dbf.data(), wf.data(), 2);
    // Float sums of up to a few thousand terms of size ~1: relative error well below 1e-5.
    check_close(yf, y, 1e-5, 1e-5, "conv2d y");
    check_close(dxf, dx, 1e-5, 1e-5, "conv2d dx");
    check_close(dwf, dw, 1e-4, 1e-5, "conv2d dweight");
    check_close(dbf, db, 1e-4, 1e-5, "conv2d dbias");
  };
  check("im2col+gemm", &cpu::conv2d_workspace_floats, &cpu::conv2d_forward<float>,
        &cpu::conv2d_backward_data<float>, &cpu::conv2d_backward_weights<float>);
  for (cpu::native::Isa isa : cpu::native::supported_isas()) {
    const auto k = cpu::native::direct_conv_kernels<float>(isa);
    check(std::string("direct ") + cpu::native::isa_name(isa), k.workspace, k.forward,
          k.backward_data, k.backward_weights);
  }
}

// ---- max pool ---------------------------------------------------------------------------------

TEST_CASE("max_pool backward matches finite differences away from ties", "[cpu]") {
  const PoolGeom geoms[] = {
      pool_geom(2, 3, 7, 6, 2, 2, 2, 2, 0, 0),  // the seed's pool on odd sizes
      pool_geom(2, 2, 7, 7, 3, 3, 2, 2, 1, 1),  // overlapping windows with padding
      pool_geom(1, 2, 5, 8, 2, 3, 1, 2, 0, 1),
  };
  int index = 0;
  for (const auto& g : geoms) {
    INFO("geometry " << index);
    const std::size_t nx = std::size_t(g.n) * g.c * g.h * g.w;
    const std::size_t ny = std::size_t(g.n) * g.c * g.out_h * g.out_w;
    // Distinct values 0.01 apart: no finite-difference step can change a window's winner.
    std::vector<double> x(nx);
    std::iota(x.begin(), x.end(), 0.0);
    std::shuffle(x.begin(), x.end(), std::mt19937_64(7 + index));
    for (auto& v : x) v = 0.01 * v - 1.0;
    const auto r = random_values(ny, 30 + index, -1, 1);
    std::vector<int32_t> argmax(ny, -7);
    const auto loss = [&] {
      auto y = poisoned<double>(ny);
      cpu::max_pool_forward(g, x.data(), y.data(), argmax.data(), 2);
      return dot(y, r);
    };
    loss();
    // Each output is the largest input of its window and argmax points at it.
    for (std::size_t o = 0; o < ny; ++o) REQUIRE(argmax[o] >= 0);
    auto dx = poisoned<double>(nx);
    cpu::max_pool_backward(g, r.data(), argmax.data(), dx.data(), 2);
    check_gradient(dx, numeric_gradient(x, loss), "max_pool dx");
    ++index;
  }
}

TEST_CASE("max_pool: padded positions never win, ties go to the first element", "[cpu]") {
  const PoolGeom g = pool_geom(1, 1, 2, 2, 2, 2, 2, 2, 1, 1);  // each window holds one real pixel
  const std::vector<double> x = {-5, -6, -7, -8};
  std::vector<double> y(4);
  std::vector<int32_t> argmax(4);
  cpu::max_pool_forward(g, x.data(), y.data(), argmax.data(), 1);
  CHECK(y == std::vector<double>{-5, -6, -7, -8});
  CHECK(argmax == std::vector<int32_t>{0, 1, 2, 3});

  const PoolGeom t = pool_geom(1, 1, 2, 2, 2, 2, 2, 2, 0, 0);
  const std::vector<float> ties = {1, 3, 3, 2};
  std::vector<float> yt(1);
  std::vector<int32_t> at(1);
  cpu::max_pool_forward(t, ties.data(), yt.data(), at.data(), 1);
  CHECK(yt[0] == 3);
  CHECK(at[0] == 1);
}

// ---- relu -------------------------------------------------------------------------------------

TEST_CASE("relu backward matches finite differences away from 0", "[cpu]") {
  auto x = random_away_from_zero(37, 5, 0.05, 1.0);
  const auto r = random_values(37, 6, -1, 1);
  std::vector<double> y(37);
  const auto loss = [&] {
    auto out = poisoned<double>(37);
    cpu::relu_forward(37, x.data(), out.data(), 2);
    return dot(out, r);
  };
  cpu::relu_forward(37, x.data(), y.data(), 2);
  auto dx = poisoned<double>(37);
  cpu::relu_backward(37, y.data(), r.data(), dx.data(), 2);
  check_gradient(dx, numeric_gradient(x, loss), "relu dx");
}

TEST_CASE("relu on a large buffer (threaded path), in place, keeps NaN", "[cpu]") {
  const std::size_t n = 100003;
  auto x = cast_to<float>(random_values(n, 8, -1, 1));
  x[17] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y = x;
  cpu::relu_forward(n, y.data(), y.data(), 2);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i != 17 && y[i] != (x[i] > 0 ? x[i] : 0.0f)) ++wrong;
  }
  CHECK(wrong == 0);
  CHECK(std::isnan(y[17]));
}

// ---- batch norm -------------------------------------------------------------------------------

namespace {

// Training-mode forward through the split steps, with scratch running statistics.
template <class T>
void bn_train_forward(const ChannelGeom& g, const T* x, const T* gamma, const T* beta, T* y,
                      T* mean, T* invstd, int threads) {
  std::vector<T> sum(g.c), sumsq(g.c), rm(g.c, T(0)), rv(g.c, T(1));
  cpu::batch_norm_stats(g, x, sum.data(), sumsq.data(), threads);
  cpu::batch_norm_finalize(g.c, double(g.count()), sum.data(), sumsq.data(), 1e-3f, 0.9f, mean,
                           invstd, rm.data(), rv.data());
  cpu::batch_norm_apply(g, x, mean, invstd, gamma, beta, y, threads);
}

}  // namespace

TEST_CASE("batch norm training backward matches finite differences of stats+finalize+apply",
          "[cpu]") {
  for (const ChannelGeom g : {ChannelGeom{3, 4, 5}, ChannelGeom{7, 3, 1}}) {
    INFO("n " << g.n << " c " << g.c << " hw " << g.hw);
    const std::size_t nx = g.count() * g.c;
    auto x = random_values(nx, 40, -2, 3);
    auto gamma = random_values(g.c, 41, 0.5, 1.5), beta = random_values(g.c, 42, -1, 1);
    const auto r = random_values(nx, 43, -1, 1);
    std::vector<double> mean(g.c), invstd(g.c);
    const auto loss = [&] {
      auto y = poisoned<double>(nx);
      std::vector<double> m(g.c), is(g.c);
      bn_train_forward(g, x.data(), gamma.data(), beta.data(), y.data(), m.data(), is.data(), 2);
      return dot(y, r);
    };
    std::vector<double> y(nx);
    bn_train_forward(g, x.data(), gamma.data(), beta.data(), y.data(), mean.data(), invstd.data(),
                     2);
    auto sum_dy = poisoned<double>(g.c), sum_dy_xhat = poisoned<double>(g.c);
    cpu::batch_norm_backward_reduce(g, r.data(), x.data(), mean.data(), invstd.data(),
                                    sum_dy.data(), sum_dy_xhat.data(), 2);
    auto dx = poisoned<double>(nx);
    cpu::batch_norm_backward_apply(g, r.data(), x.data(), mean.data(), invstd.data(), gamma.data(),
                                   sum_dy.data(), sum_dy_xhat.data(), double(g.count()), dx.data(),
                                   2);
    check_gradient(dx, numeric_gradient(x, loss), "batch norm dx");
    check_gradient(sum_dy_xhat, numeric_gradient(gamma, loss), "batch norm dgamma = sum_dy_xhat");
    check_gradient(sum_dy, numeric_gradient(beta, loss), "batch norm dbeta = sum_dy");
  }
}

TEST_CASE("batch norm evaluation backward matches finite differences", "[cpu]") {
  const ChannelGeom g{4, 3, 6};
  const std::size_t nx = g.count() * g.c;
  auto x = random_values(nx, 50, -2, 2);
  auto gamma = random_values(g.c, 51, 0.5, 1.5);
  const auto beta = random_values(g.c, 52, -1, 1), r = random_values(nx, 53, -1, 1);
  const auto rm = random_values(g.c, 54, -0.5, 0.5), rv = random_values(g.c, 55, 0.5, 2);
  std::vector<double> mean(g.c), invstd(g.c);
  cpu::batch_norm_inference_params(g.c, rm.data(), rv.data(), 1e-3f, mean.data(), invstd.data());
  for (int c = 0; c < g.c; ++c) {
    CHECK(mean[c] == rm[c]);
    CHECK(invstd[c] == Approx(1 / std::sqrt(rv[c] + double(1e-3f))).epsilon(1e-14));
  }
  const auto loss = [&] {
    auto y = poisoned<double>(nx);
    cpu::batch_norm_apply(g, x.data(), mean.data(), invstd.data(), gamma.data(), beta.data(),
                          y.data(), 2);
    return dot(y, r);
  };
  // Statistics are constants in evaluation: backward_apply with zero sums is the whole gradient.
  const std::vector<double> zeros(g.c, 0.0);
  auto dx = poisoned<double>(nx);
  cpu::batch_norm_backward_apply(g, r.data(), x.data(), mean.data(), invstd.data(), gamma.data(),
                                 zeros.data(), zeros.data(), double(g.count()), dx.data(), 2);
  check_gradient(dx, numeric_gradient(x, loss), "batch norm (eval) dx");
  auto sum_dy = poisoned<double>(g.c), sum_dy_xhat = poisoned<double>(g.c);
  cpu::batch_norm_backward_reduce(g, r.data(), x.data(), mean.data(), invstd.data(), sum_dy.data(),
                                  sum_dy_xhat.data(), 2);
  check_gradient(sum_dy_xhat, numeric_gradient(gamma, loss), "batch norm (eval) dgamma");
}

TEST_CASE("batch norm finalize: biased variance for invstd, unbiased for the running variance",
          "[cpu]") {
  // One channel holding 1, 2, 3, 4: mean 2.5, biased variance 1.25, unbiased 5/3.
  const ChannelGeom g{2, 1, 2};
  const std::vector<float> x = {1, 2, 3, 4};
  std::vector<float> sum(1, NAN), sumsq(1, NAN), mean(1, NAN), invstd(1, NAN);
  std::vector<float> rm = {1.0f}, rv = {2.0f};
  cpu::batch_norm_stats(g, x.data(), sum.data(), sumsq.data(), 1);
  CHECK(sum[0] == 10);
  CHECK(sumsq[0] == 30);
  cpu::batch_norm_finalize(1, 4.0, sum.data(), sumsq.data(), 1e-3f, 0.9f, mean.data(),
                           invstd.data(), rm.data(), rv.data());
  CHECK(mean[0] == 2.5f);
  CHECK(invstd[0] == Approx(1 / std::sqrt(1.25 + 1e-3)).epsilon(1e-6));
  CHECK(rm[0] == Approx(0.9 * 1.0 + 0.1 * 2.5).epsilon(1e-6));
  CHECK(rv[0] == Approx(0.9 * 2.0 + 0.1 * (5.0 / 3.0)).epsilon(1e-6));
}

TEST_CASE("batch norm in float agrees with double", "[cpu]") {
  const ChannelGeom g{16, 6, 196};
  const std::size_t nx = g.count() * g.c;
  // An offset mean makes E[x^2] - E[x]^2 cancel: the double accumulation must carry it.
  const auto x = random_values(nx, 60, 4, 6), dy = random_values(nx, 61, -1, 1);
  const auto gamma = random_values(g.c, 62, 0.5, 1.5), beta = random_values(g.c, 63, -1, 1);
  std::vector<double> y(nx), m(g.c), is(g.c), sd(g.c), sdx(g.c), dx(nx);
  bn_train_forward(g, x.data(), gamma.data(), beta.data(), y.data(), m.data(), is.data(), 2);
  cpu::batch_norm_backward_reduce(g, dy.data(), x.data(), m.data(), is.data(), sd.data(),
                                  sdx.data(), 2);
  cpu::batch_norm_backward_apply(g, dy.data(), x.data(), m.data(), is.data(), gamma.data(),
                                 sd.data(), sdx.data(), double(g.count()), dx.data(), 2);
  const auto xf = cast_to<float>(x), dyf = cast_to<float>(dy), gf = cast_to<float>(gamma),
             bf = cast_to<float>(beta);
  std::vector<float> yf(nx), mf(g.c), isf(g.c), sdf(g.c), sdxf(g.c), dxf(nx);
  bn_train_forward(g, xf.data(), gf.data(), bf.data(), yf.data(), mf.data(), isf.data(), 2);
  cpu::batch_norm_backward_reduce(g, dyf.data(), xf.data(), mf.data(), isf.data(), sdf.data(),
                                  sdxf.data(), 2);
  cpu::batch_norm_backward_apply(g, dyf.data(), xf.data(), mf.data(), isf.data(), gf.data(),
                                 sdf.data(), sdxf.data(), double(g.count()), dxf.data(), 2);
  check_close(yf, y, 1e-4, 1e-4, "batch norm y");
  check_close(dxf, dx, 1e-4, 1e-4, "batch norm dx");
  check_close(sdxf, sdx, 1e-2, 1e-4, "batch norm sum_dy_xhat");
}

// ---- dense ------------------------------------------------------------------------------------

TEST_CASE("dense backward matches finite differences", "[cpu]") {
  for (int threads : {1, 2, 3}) {
    INFO("threads " << threads);
    const int n = 5, in = 7, out = 3;
    auto x = random_values(n * in, 70, -1, 1), w = random_values(out * in, 71, -1, 1);
    auto b = random_values(out, 72, -1, 1);
    const auto r = random_values(n * out, 73, -1, 1);
    const auto loss = [&] {
      auto y = poisoned<double>(n * out);
      cpu::dense_forward(n, in, out, x.data(), w.data(), b.data(), y.data(), threads);
      return dot(y, r);
    };
    auto dx = poisoned<double>(n * in), dw = poisoned<double>(out * in), db = poisoned<double>(out);
    cpu::dense_backward_data(n, in, out, r.data(), w.data(), dx.data(), threads);
    cpu::dense_backward_weights(n, in, out, x.data(), r.data(), dw.data(), db.data(), threads);
    check_gradient(dx, numeric_gradient(x, loss), "dense dx");
    check_gradient(dw, numeric_gradient(w, loss), "dense dweight");
    check_gradient(db, numeric_gradient(b, loss), "dense dbias");
  }
}

TEST_CASE("dense in float agrees with double at the seed's size", "[cpu]") {
  const int n = 64, in = 588, out = 100;
  const auto x = random_values(n * in, 80, -1, 1), w = random_values(out * in, 81, -0.1, 0.1);
  const auto b = random_values(out, 82, -1, 1), dy = random_values(n * out, 83, -1, 1);
  std::vector<double> y(n * out), dx(n * in), dw(out * in), db(out);
  cpu::dense_forward(n, in, out, x.data(), w.data(), b.data(), y.data(), 2);
  cpu::dense_backward_data(n, in, out, dy.data(), w.data(), dx.data(), 2);
  cpu::dense_backward_weights(n, in, out, x.data(), dy.data(), dw.data(), db.data(), 2);
  const auto xf = cast_to<float>(x), wf = cast_to<float>(w), bf = cast_to<float>(b),
             dyf = cast_to<float>(dy);
  std::vector<float> yf(y.size()), dxf(dx.size()), dwf(dw.size()), dbf(db.size());
  cpu::dense_forward(n, in, out, xf.data(), wf.data(), bf.data(), yf.data(), 2);
  cpu::dense_backward_data(n, in, out, dyf.data(), wf.data(), dxf.data(), 2);
  cpu::dense_backward_weights(n, in, out, xf.data(), dyf.data(), dwf.data(), dbf.data(), 2);
  check_close(yf, y, 1e-5, 1e-5, "dense y");
  check_close(dxf, dx, 1e-5, 1e-5, "dense dx");
  check_close(dwf, dw, 1e-5, 1e-5, "dense dweight");
  check_close(dbf, db, 1e-5, 1e-5, "dense dbias");
}

// ---- dropout ----------------------------------------------------------------------------------

TEST_CASE("dropout backward matches finite differences", "[cpu]") {
  const int n = 6, per = 11;
  const RngKey key = make_rng_key(1234, 3);
  auto x = random_values(n * per, 90, -1, 1);
  const auto r = random_values(n * per, 91, -1, 1);
  const auto loss = [&] {
    auto y = poisoned<double>(n * per);
    cpu::dropout_forward(n, per, 0.4f, key, 5, 100, x.data(), y.data(), 2);
    return dot(y, r);
  };
  auto dx = poisoned<double>(n * per);
  cpu::dropout_backward(n, per, 0.4f, key, 5, 100, r.data(), dx.data(), 2);
  check_gradient(dx, numeric_gradient(x, loss), "dropout dx");
}

namespace {
std::vector<float> dropout_of_ones(int n, int per, float rate, RngKey key, uint32_t step,
                                   uint32_t first) {
  std::vector<float> ones(std::size_t(n) * per, 1.0f), y(ones.size(), NAN);
  cpu::dropout_forward(n, per, rate, key, step, first, ones.data(), y.data(), 2);
  return y;
}
}  // namespace

TEST_CASE("dropout masks follow (key, step, global sample, element)", "[cpu]") {
  const RngKey key = make_rng_key(42, 7);
  const int per = 100;
  const float rate = 0.5f;
  const auto a = dropout_of_ones(8, per, rate, key, 3, 0);
  CHECK(a == dropout_of_ones(8, per, rate, key, 3, 0));
  CHECK(a != dropout_of_ones(8, per, rate, key, 4, 0));
  CHECK(a != dropout_of_ones(8, per, rate, key, 3, 8));
  CHECK(a != dropout_of_ones(8, per, rate, make_rng_key(42, 8), 3, 0));

  // The same global batch split into two calls gives the same masks.
  auto halves = dropout_of_ones(4, per, rate, key, 3, 0);
  const auto second = dropout_of_ones(4, per, rate, key, 3, 4);
  halves.insert(halves.end(), second.begin(), second.end());
  CHECK(a == halves);

  // Each value is exactly the rule in backend.hpp: philox counter (step, sample, element, 0).
  std::size_t wrong = 0;
  for (int i = 0; i < 8; ++i) {
    for (int e = 0; e < per; ++e) {
      const bool keep = uniform01(philox4x32(3, i, e, 0, key.k0, key.k1).v[0]) >= rate;
      if (a[i * per + e] != (keep ? 1.0f / (1.0f - rate) : 0.0f)) ++wrong;
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("dropout keeps a fraction 1-rate of the elements", "[cpu]") {
  for (float rate : {0.25f, 0.5f, 0.9f}) {
    const int n = 64, per = 1000;
    const auto y = dropout_of_ones(n, per, rate, make_rng_key(9, 1), 11, 512);
    const double kept = std::count_if(y.begin(), y.end(), [](float v) { return v != 0; });
    const double total = double(n) * per, p = 1.0 - rate;
    const double sigma = std::sqrt(total * p * (1 - p));
    INFO("rate " << rate << " kept " << kept << " of " << total);
    CHECK(std::abs(kept - total * p) < 4 * sigma);
  }
  // rate 0 keeps everything unchanged; a rate of 1 or more is refused.
  CHECK(dropout_of_ones(3, 5, 0.0f, make_rng_key(1, 1), 0, 0) == std::vector<float>(15, 1.0f));
  CHECK_THROWS_AS(dropout_of_ones(3, 5, 1.0f, make_rng_key(1, 1), 0, 0), RuntimeError);
}

// ---- softmax cross-entropy ---------------------------------------------------------------------

TEST_CASE("softmax cross-entropy gradient matches finite differences of the loss sum", "[cpu]") {
  const int n = 5, k = 7;
  auto logits = random_values(n * k, 95, -3, 3);
  const std::vector<int32_t> labels = {0, 6, 3, 3, 1};
  const auto loss = [&] {
    std::vector<double> metrics(3, 0.0);
    cpu::softmax_cross_entropy(n, k, logits.data(), labels.data(), 1.0f,
                               static_cast<double*>(nullptr), metrics.data(), 2);
    return metrics[kLossSum];
  };
  std::vector<double> metrics(3, 0.0);
  auto dlogits = poisoned<double>(n * k);
  cpu::softmax_cross_entropy(n, k, logits.data(), labels.data(), 1.0f, dlogits.data(),
                             metrics.data(), 2);
  check_gradient(dlogits, numeric_gradient(logits, loss), "softmax cross-entropy dlogits");
  // grad_scale multiplies the assigned gradient.
  auto scaled = poisoned<double>(n * k);
  cpu::softmax_cross_entropy(n, k, logits.data(), labels.data(), 0.25f, scaled.data(),
                             metrics.data(), 2);
  for (auto& v : dlogits) v *= 0.25;
  check_close(scaled, dlogits, 1e-15, 1e-14, "grad_scale 0.25");
}

TEST_CASE("softmax cross-entropy accumulates loss sum, correct count (ties) and samples", "[cpu]") {
  const std::vector<float> logits = {1, 2, 3,   // argmax 2 = label: correct
                                     0, 0, 0,   // three-way tie -> 0, label 1: wrong
                                     5, 5, 1};  // tie 0/1 -> 0 = label: correct
  const std::vector<int32_t> labels = {2, 1, 0};
  // Start from earlier values: the kernel adds, never assigns.
  std::vector<float> metrics = {10.0f, 1.0f, 4.0f};
  cpu::softmax_cross_entropy(3, 3, logits.data(), labels.data(), 1.0f, static_cast<float*>(nullptr),
                             metrics.data(), 2);
  // -log p: log(1 + e^-1 + e^-2) + log 3 + log(2 + e^-4), computed by hand.
  CHECK(metrics[kLossSum] == Approx(10.0 + 2.20848157455).epsilon(1e-6));
  CHECK(metrics[kCorrect] == 3.0f);
  CHECK(metrics[kSamples] == 7.0f);

  const std::vector<int32_t> bad = {2, 3, 0};
  CHECK_THROWS_WITH(cpu::softmax_cross_entropy(3, 3, logits.data(), bad.data(), 1.0f,
                                               static_cast<float*>(nullptr), metrics.data(), 1),
                    Catch::Contains("sample 1") && Catch::Contains("is 3"));
}

// ---- optimizers -------------------------------------------------------------------------------

namespace {
const std::vector<std::vector<float>> kGrads = {{0.5f, -1.0f}, {0.1f, 0.3f}, {-0.2f, 0.4f}};
}

TEST_CASE("adam matches hand-computed values for three steps", "[cpu]") {
  // p -= lr * m_hat / (sqrt(v_hat) + eps), lr 0.1, betas 0.9/0.999, eps 1e-8 (worked in double).
  const double expected[3][2] = {
      {0.900000002, -1.9}, {0.819695906, -1.85721514}, {0.785260532, -1.84920924}};
  std::vector<float> p = {1.0f, -2.0f}, m(2, 0.0f), v(2, 0.0f);
  OptimizerStep s;
  s.lr = 0.1f;
  for (int t = 0; t < 3; ++t) {
    s.step = t + 1;
    cpu::adam_update(2, 0, s, p.data(), kGrads[t].data(), m.data(), v.data(), 2);
    INFO("step " << t + 1);
    CHECK(p[0] == Approx(expected[t][0]).epsilon(1e-6));
    CHECK(p[1] == Approx(expected[t][1]).epsilon(1e-6));
  }
}

TEST_CASE("adam adds epsilon to sqrt(v_hat), not to sqrt(v)", "[cpu]") {
  // With eps = 1 the forms differ. Step 1 has m_hat = g and sqrt(v_hat) = |g|, so this form gives
  // p = 1 - lr * 0.5 / (0.5 + 1); adding eps to sqrt(v) instead would move p by about lr * 0.016.
  std::vector<double> p = {1.0}, m = {0.0}, v = {0.0};
  const std::vector<double> g = {0.5};
  OptimizerStep s;
  s.lr = 0.1f;
  s.epsilon = 1.0f;
  s.step = 1;
  cpu::adam_update(1, 0, s, p.data(), g.data(), m.data(), v.data(), 1);
  CHECK(p[0] == Approx(1.0 - double(0.1f) * 0.5 / 1.5).epsilon(1e-12));
}

TEST_CASE("sgd with momentum and with Nesterov matches hand-computed values", "[cpu]") {
  // lr 0.1, mu 0.9; v = mu v + g; plain p -= lr v; Nesterov p -= lr (g + mu v).
  const double plain[3][2] = {{0.95, -1.9}, {0.895, -1.84}, {0.8655, -1.826}};
  const double nesterov[3][2] = {{0.905, -1.81}, {0.8455, -1.786}, {0.83895, -1.8134}};
  for (bool nest : {false, true}) {
    std::vector<float> p = {1.0f, -2.0f}, vel(2, 0.0f);
    OptimizerStep s;
    s.lr = 0.1f;
    s.momentum = 0.9f;
    s.nesterov = nest;
    for (int t = 0; t < 3; ++t) {
      cpu::sgd_update(2, 0, s, p.data(), kGrads[t].data(), vel.data(), 1);
      const auto& want = nest ? nesterov[t] : plain[t];
      INFO("nesterov " << nest << " step " << t + 1);
      CHECK(p[0] == Approx(want[0]).epsilon(1e-6));
      CHECK(p[1] == Approx(want[1]).epsilon(1e-6));
    }
  }
}

TEST_CASE("weight decay changes exactly the first n_decay elements", "[cpu]") {
  const std::vector<double> p0 = {1.0, -2.0, 3.0, -4.0}, g = {0.5, 0.25, -0.5, 1.0};
  const std::size_t n = 4, n_decay = 2;
  OptimizerStep plain;
  plain.lr = 0.1f;
  SECTION("sgd, coupled L2: g += l2 p") {
    auto p = p0, ref = p0;
    std::vector<double> v(n, 0.0), vr(n, 0.0);
    OptimizerStep s = plain;
    s.l2 = 0.5f;
    cpu::sgd_update(n, n_decay, s, p.data(), g.data(), v.data(), 1);
    cpu::sgd_update(n, 0, plain, ref.data(), g.data(), vr.data(), 1);
    for (std::size_t i = 0; i < n; ++i) {
      const double want = i < n_decay ? p0[i] - 0.1 * (g[i] + 0.5 * p0[i]) : ref[i];
      CHECK(p[i] == Approx(want).epsilon(1e-7));
    }
    CHECK(p[2] == ref[2]);
    CHECK(p[3] == ref[3]);
  }
  SECTION("sgd and adam, decoupled: p -= lr wd p on top of the plain update") {
    for (bool adam : {false, true}) {
      INFO("adam " << adam);
      auto p = p0, ref = p0;
      std::vector<double> a(n, 0.0), b(n, 0.0), ar(n, 0.0), br(n, 0.0);
      OptimizerStep s = plain;
      s.decoupled_wd = 0.2f;
      if (adam) {
        cpu::adam_update(n, n_decay, s, p.data(), g.data(), a.data(), b.data(), 1);
        cpu::adam_update(n, 0, plain, ref.data(), g.data(), ar.data(), br.data(), 1);
      } else {
        cpu::sgd_update(n, n_decay, s, p.data(), g.data(), a.data(), 1);
        cpu::sgd_update(n, 0, plain, ref.data(), g.data(), ar.data(), 1);
      }
      for (std::size_t i = 0; i < n; ++i) {
        const double want = i < n_decay ? ref[i] - double(0.1f) * double(0.2f) * p0[i] : ref[i];
        CHECK(p[i] == Approx(want).epsilon(1e-7));
      }
      CHECK(p[2] == ref[2]);
      CHECK(p[3] == ref[3]);
    }
  }
  SECTION("adam, coupled L2 is Adam on g + l2 p") {
    auto p = p0, ref = p0;
    std::vector<double> m(n, 0.0), v(n, 0.0), mr(n, 0.0), vr(n, 0.0);
    OptimizerStep s = plain;
    s.l2 = 0.5f;
    cpu::adam_update(n, n_decay, s, p.data(), g.data(), m.data(), v.data(), 1);
    std::vector<double> g_l2 = g;
    for (std::size_t i = 0; i < n_decay; ++i) g_l2[i] += 0.5 * p0[i];
    cpu::adam_update(n, 0, plain, ref.data(), g_l2.data(), mr.data(), vr.data(), 1);
    check_close(p, ref, 0, 1e-15, "adam with l2");
    CHECK(m == mr);
  }
}

// ---- gather and elementwise helpers -----------------------------------------------------------

TEST_CASE("gather_batch scales the chosen images to [0, 1] and copies their labels", "[cpu]") {
  const int pixels = 3;
  const std::vector<uint8_t> images = {0, 255, 51, 10, 20, 30, 1, 2, 3};
  const std::vector<uint8_t> labels = {7, 8, 9};
  const std::vector<int32_t> idx = {2, 0, 2};
  auto x = poisoned<float>(9);
  std::vector<int32_t> y(3, -1);
  cpu::gather_batch(images.data(), labels.data(), pixels, idx.data(), 3, x.data(), y.data(), 2);
  CHECK(x == std::vector<float>{1 / 255.f, 2 / 255.f, 3 / 255.f, 0.f, 1.f, 0.2f, 1 / 255.f,
                                2 / 255.f, 3 / 255.f});
  CHECK(y == std::vector<int32_t>{9, 7, 9});
}

TEST_CASE("elementwise helpers: fill, scale, add", "[cpu]") {
  const std::size_t n = 40000;  // above the single-thread cut-off
  std::vector<float> x(n), y(n);
  cpu::fill(n, 2.0f, x.data(), 2);
  cpu::fill(n, 1.0f, y.data(), 2);
  cpu::scale(n, 1.5f, x.data(), 2);
  cpu::add(n, x.data(), y.data(), 2);
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 4.0f; }));
}

TEST_CASE("pool, dropout, softmax cross-entropy and adam in float agree with double", "[cpu]") {
  const PoolGeom g = pool_geom(3, 4, 9, 8, 2, 2, 2, 2, 0, 0);
  const std::size_t nx = std::size_t(g.n) * g.c * g.h * g.w;
  const std::size_t ny = std::size_t(g.n) * g.c * g.out_h * g.out_w;
  const auto x = random_values(nx, 200, -1, 1);
  const auto xf = cast_to<float>(x);
  std::vector<double> y(ny);
  std::vector<float> yf(ny);
  std::vector<int32_t> a(ny), af(ny);
  cpu::max_pool_forward(g, x.data(), y.data(), a.data(), 2);
  cpu::max_pool_forward(g, xf.data(), yf.data(), af.data(), 2);
  CHECK(a == af);
  check_close(yf, y, 0, 1e-7, "max_pool y");

  const RngKey key = make_rng_key(5, 5);
  std::vector<double> d(nx);
  std::vector<float> df(nx);
  cpu::dropout_forward(g.n, int(nx / g.n), 0.3f, key, 2, 10, x.data(), d.data(), 2);
  cpu::dropout_forward(g.n, int(nx / g.n), 0.3f, key, 2, 10, xf.data(), df.data(), 2);
  check_close(df, d, 0, 1e-6, "dropout y");  // same mask: zeros match exactly

  const int n = 33, k = 10;
  const auto logits = random_values(n * k, 201, -4, 4);
  const auto lf = cast_to<float>(logits);
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[i] = (i * 7) % k;
  std::vector<double> m(3, 0.0), dl(n * k);
  std::vector<float> mf(3, 0.0f), dlf(n * k);
  cpu::softmax_cross_entropy(n, k, logits.data(), labels.data(), 0.5f, dl.data(), m.data(), 2);
  cpu::softmax_cross_entropy(n, k, lf.data(), labels.data(), 0.5f, dlf.data(), mf.data(), 2);
  check_close(mf, m, 0, 1e-6, "softmax metrics");
  check_close(dlf, dl, 1e-7, 1e-5, "softmax dlogits");

  const auto p0 = random_values(50, 202, -1, 1), gr = random_values(50, 203, -1, 1);
  auto p = p0;
  auto pf = cast_to<float>(p0);
  std::vector<double> m1(50, 0.0), v1(50, 0.0);
  std::vector<float> m1f(50, 0.0f), v1f(50, 0.0f);
  const auto grf = cast_to<float>(gr);
  OptimizerStep s;
  s.l2 = 0.01f;
  for (int t = 1; t <= 3; ++t) {
    s.step = t;
    cpu::adam_update(50, 20, s, p.data(), gr.data(), m1.data(), v1.data(), 2);
    cpu::adam_update(50, 20, s, pf.data(), grf.data(), m1f.data(), v1f.data(), 2);
  }
  check_close(pf, p, 1e-6, 1e-6, "adam params");
}
