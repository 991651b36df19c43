// CpuBackend through the Backend interface: construction rules, memory, and a few kernels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "backend/backend.hpp"
#include "backend/cpu/conv2d.hpp"
#include "backend/cpu/native/isa.hpp"
#include "build_info.hpp"
#include "core/error.hpp"
#include "support/gradcheck.hpp"

using namespace mnist;
using namespace mnist::test;

namespace {
std::unique_ptr<Backend> cpu_backend(int index = 0, int threads = 2) {
  BackendOptions o;
  o.worker_index = index;
  o.threads = threads;
  return make_cpu_backend(o);
}
}  // namespace

TEST_CASE("make_cpu_backend: name, kind, and only the CPU engines of this build", "[cpu]") {
  const auto b = cpu_backend(3);
  CHECK(b->name() == "cpu3");
  CHECK(b->kind() == DeviceKind::cpu);
  const std::vector<Engine> engines = cpu_engines();
  REQUIRE(engines.front() == Engine::native);
  CHECK(engines.size() == (MNIST_HAVE_BLAS ? 2u : 1u));
  BackendOptions o;
  o.engine = Engine::cudnn;
  CHECK_THROWS_AS(make_cpu_backend(o), RuntimeError);
  CHECK_THROWS_WITH(make_cpu_backend(o),
                    Catch::Contains("'cudnn'") && Catch::Contains("allowed: native"));
  for (const Engine engine : engines) {
    o.engine = engine;
    CHECK(make_cpu_backend(o)->kind() == DeviceKind::cpu);
  }
  if (!MNIST_HAVE_BLAS) {
    o.engine = Engine::blas;
    CHECK_THROWS_WITH(make_cpu_backend(o), Catch::Contains("no OpenBLAS"));
  }
  o.engine = Engine::native;
  o.threads = -1;
  CHECK_THROWS_WITH(make_cpu_backend(o), Catch::Contains("threads = -1"));
}

TEST_CASE("MNIST_CPU_ISA picks the native engine's instruction set, and names a bad one", "[cpu]") {
  const char* saved = std::getenv("MNIST_CPU_ISA");
  const std::string restore = saved ? saved : "";
  for (cpu::native::Isa isa : cpu::native::supported_isas()) {
    setenv("MNIST_CPU_ISA", cpu::native::isa_name(isa), 1);
    CHECK(cpu::native::chosen_isa() == isa);
  }
  setenv("MNIST_CPU_ISA", "sse9", 1);
  CHECK_THROWS_WITH(cpu::native::chosen_isa(),
                    Catch::Contains("MNIST_CPU_ISA=sse9") && Catch::Contains("avx512, avx2"));
  CHECK_THROWS_WITH(cpu_backend(), Catch::Contains("MNIST_CPU_ISA=sse9"));
  if (restore.empty())
    unsetenv("MNIST_CPU_ISA");
  else
    setenv("MNIST_CPU_ISA", restore.c_str(), 1);
  CHECK(cpu::native::supported_isas().back() == cpu::native::Isa::portable);
}

TEST_CASE("every CPU engine's convolutions agree with the double oracle on the seed's layers",
          "[cpu]") {
  // The seed's two convolutions (batch 3), and a strided one the native engine sends to im2col.
  Conv2dGeom seed1, seed2, strided;
  seed1.n = 3, seed1.c = 1, seed1.h = seed1.w = 28, seed1.k = 6, seed1.kh = seed1.kw = 5;
  seed1.pad_h = seed1.pad_w = 2, seed1.out_h = seed1.out_w = 28;
  seed2 = seed1;
  seed2.c = 6, seed2.h = seed2.w = 14, seed2.k = 12, seed2.out_h = seed2.out_w = 14;
  strided = seed2;
  strided.stride_h = strided.stride_w = 2, strided.out_h = strided.out_w = 7;
  for (const Engine engine : cpu_engines()) {
    for (const Conv2dGeom& g : {seed1, seed2, strided}) {
      INFO("engine " << to_string(engine) << ", c " << g.c << ", stride " << g.stride_h);
      const std::size_t xs = std::size_t(g.n) * g.c * g.h * g.w,
                        ys = std::size_t(g.n) * g.k * g.out_h * g.out_w,
                        ws = std::size_t(g.k) * g.c * g.kh * g.kw;
      const auto x = random_values(xs, 11, -1, 1), w = random_values(ws, 12, -0.3, 0.3),
                 bias = random_values(g.k, 13, -1, 1), dy = random_values(ys, 14, -1, 1);
      std::vector<double> y(ys), dx(xs), dw(ws), db(g.k);
      std::vector<double> wd(cpu::conv2d_workspace_floats(g, 1));
      cpu::conv2d_forward(g, x.data(), w.data(), bias.data(), y.data(), wd.data(), 1);
      cpu::conv2d_backward_data(g, dy.data(), w.data(), dx.data(), wd.data(), 1);
      cpu::conv2d_backward_weights(g, x.data(), dy.data(), dw.data(), db.data(), wd.data(), 1);

      BackendOptions o;
      o.threads = 2;
      o.engine = engine;
      const auto b = make_cpu_backend(o);
      const auto xf = cast_to<float>(x), wf = cast_to<float>(w), bf = cast_to<float>(bias),
                 dyf = cast_to<float>(dy);
      std::vector<float> work(b->conv2d_workspace_floats(g), NAN);
      std::vector<float> yf(ys, NAN), dxf(xs, NAN), dwf(ws, NAN), dbf(g.k, NAN);
      b->conv2d_forward(g, xf.data(), wf.data(), bf.data(), yf.data(), work.data());
      b->conv2d_backward_data(g, dyf.data(), wf.data(), dxf.data(), work.data());
      b->conv2d_backward_weights(g, xf.data(), dyf.data(), dwf.data(), dbf.data(), work.data());
      check_close(yf, y, 1e-5, 1e-5, "y");
      // The forward that also takes the batch-norm statistics: the same y, and the sums of the
      // double oracle's y.
      std::vector<double> sum(g.k, 0.0), sumsq(g.k, 0.0);
      const std::size_t plane = std::size_t(g.out_h) * g.out_w;
      for (std::size_t i = 0; i < ys; ++i) {
        const std::size_t k = i / plane % g.k;
        sum[k] += y[i];
        sumsq[k] += y[i] * y[i];
      }
      std::vector<float> ys2(ys, NAN), sumf(g.k, NAN), sumsqf(g.k, NAN);
      b->fused().conv2d_forward_stats(g, xf.data(), wf.data(), bf.data(), ys2.data(), sumf.data(),
                                      sumsqf.data(), nullptr, work.data());
      CHECK(ys2 == yf);
      check_close(sumf, sum, 1e-4, 1e-5, "sum");
      check_close(sumsqf, sumsq, 1e-4, 1e-5, "sumsq");
      check_close(dxf, dx, 1e-5, 1e-5, "dx");
      check_close(dwf, dw, 1e-4, 1e-5, "dweight");
      check_close(dbf, db, 1e-4, 1e-5, "dbias");
    }
  }
}

TEST_CASE("CpuBackend memory: 64-byte aligned, copies, and a failure naming the size", "[cpu]") {
  const auto b = cpu_backend();
  DeviceBuffer<float> a(*b, 13), c(*b, 13);
  CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);
  std::vector<float> host(13), back(13, -1);
  for (int i = 0; i < 13; ++i) host[i] = i * 0.5f;
  b->copy_to_device(a.data(), host.data(), a.bytes());
  b->copy_on_device(c.data(), a.data(), a.bytes());
  b->scale(13, 2.0f, c.data());
  b->copy_to_host(back.data(), c.data(), c.bytes());
  for (int i = 0; i < 13; ++i) CHECK(back[i] == i * 1.0f);
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  CHECK_THROWS_AS(b->allocate(huge), RuntimeError);
  CHECK_THROWS_WITH(b->allocate(huge),
                    Catch::Contains("cpu0") && Catch::Contains(std::to_string(huge) + " bytes"));
}

TEST_CASE("CpuBackend dense and softmax forward give hand-computed values", "[cpu]") {
  const auto b = cpu_backend();
  // x = [1, 2], weight = [[1, 0], [0, 1], [1, 1]], bias = [0.5, 0, -1] -> y = [1.5, 2, 2].
  const std::vector<float> x = {1, 2}, w = {1, 0, 0, 1, 1, 1}, bias = {0.5f, 0, -1};
  std::vector<float> y(3, NAN);
  b->dense_forward(1, 2, 3, x.data(), w.data(), bias.data(), y.data());
  CHECK(y == std::vector<float>{1.5f, 2, 2});
  // Label 1 is the first of the tied maxima: correct; loss = log(e^-0.5 + 1 + 1).
  const std::vector<int32_t> label = {1};
  std::vector<float> metrics(3, 0.0f), dlogits(3, NAN);
  b->softmax_cross_entropy(1, 3, y.data(), label.data(), 1.0f, dlogits.data(), metrics.data());
  CHECK(metrics[kLossSum] == Approx(std::log(std::exp(-0.5) + 2.0)).epsilon(1e-6));
  CHECK(metrics[kCorrect] == 1.0f);
  CHECK(metrics[kSamples] == 1.0f);
  const double denom = std::exp(-0.5) + 2.0;
  CHECK(dlogits[0] == Approx(std::exp(-0.5) / denom).epsilon(1e-6));
  CHECK(dlogits[1] == Approx(1 / denom - 1).epsilon(1e-6));
}

TEST_CASE("CpuBackend conv2d forward equals the cpu kernel, with any thread count", "[cpu]") {
  // The backend's default engine (native) convolves directly; the reference is im2col + OpenBLAS,
  // whose kernel, and so its order of additions, depends on the CPU (an AVX-512 machine's
  // differs from an AVX2 one's). So: the im2col reference within float rounding, and the same
  // bits for every thread count.
  Conv2dGeom g;
  g.n = 5, g.c = 1, g.h = 28, g.w = 28, g.k = 6, g.kh = 5, g.kw = 5, g.pad_h = 2, g.pad_w = 2;
  g.out_h = 28, g.out_w = 28;
  const auto x = cast_to<float>(random_values(5 * 784, 1, 0, 1));
  const auto w = cast_to<float>(random_values(150, 2, -0.1, 0.1));
  const auto bias = cast_to<float>(random_values(6, 3, -0.1, 0.1));
  std::vector<float> ref(5 * 6 * 784);
  std::vector<float> work1(cpu::conv2d_workspace_floats(g, 1));
  cpu::conv2d_forward(g, x.data(), w.data(), bias.data(), ref.data(), work1.data(), 1);
  // A direct sum at one interior and one border position guards the reference itself.
  for (int pos : {0, 14 * 28 + 9}) {
    const int oy = pos / 28, ox = pos % 28;
    double want = bias[4];
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 5; ++j) {
        const int iy = oy + i - 2, ix = ox + j - 2;
        if (iy >= 0 && iy < 28 && ix >= 0 && ix < 28)
          want += w[100 + i * 5 + j] * x[3 * 784 + iy * 28 + ix];
      }
    CHECK(ref[(3 * 6 + 4) * 784 + pos] == Approx(want).epsilon(1e-5));
  }
  std::vector<float> one_thread;
  for (int threads : {1, 2, 4}) {
    const auto b = cpu_backend(0, threads);
    std::vector<float> work(b->conv2d_workspace_floats(g), NAN), y(ref.size(), NAN);
    b->conv2d_forward(g, x.data(), w.data(), bias.data(), y.data(), work.data());
    INFO("threads " << threads);
    double worst = 0;  // |y| <= ~2.6 here: 25 taps of x in [0, 1] times |w| <= 0.1, plus bias
    for (std::size_t i = 0; i < y.size(); ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(y[i]) - ref[i]));  // NaN: stays 0
    CHECK(std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); }));
    CHECK(worst <= 1e-5);
    if (threads == 1) one_thread = y;
    CHECK(y == one_thread);  // each sample is computed the same way whatever the split
  }
}

TEST_CASE("CpuBackends in parallel worker threads give the same results", "[cpu]") {
  const int n = 64, in = 588, out = 100;
  const auto x = cast_to<float>(random_values(n * in, 5, -1, 1));
  const auto w = cast_to<float>(random_values(out * in, 6, -0.1, 0.1));
  std::vector<float> ref(n * out);
  cpu_backend()->dense_forward(n, in, out, x.data(), w.data(), nullptr, ref.data());
  std::vector<std::vector<float>> ys(3, std::vector<float>(n * out, NAN));
  std::vector<std::thread> workers;
  for (int k = 0; k < 3; ++k) {
    workers.emplace_back([&, k] {
      const auto b = cpu_backend(k, 2);
      for (int rep = 0; rep < 20; ++rep)
        b->dense_forward(n, in, out, x.data(), w.data(), nullptr, ys[k].data());
    });
  }
  for (auto& t : workers) t.join();
  for (int k = 0; k < 3; ++k) CHECK(ys[k] == ref);
}
