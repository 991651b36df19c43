// The cudnn engine's plans: which algorithm each direction runs, and that sizing a small batch
// first does not cap a larger one. Only a real GPU runs these (cuDNN is not emulated).
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "build_info.hpp"
#include "config/spellings.hpp"
#include "gpu/gpu_support.hpp"

using namespace gpu_test;

namespace {

// The seed network's convolutions (SAME 5x5).
mnist::Conv2dGeom seed_conv(int n, bool second) {
  mnist::Conv2dGeom g;
  g.n = n;
  g.c = second ? 6 : 1;
  g.h = g.w = second ? 14 : 28;
  g.k = second ? 12 : 6;
  g.kh = g.kw = 5;
  g.pad_h = g.pad_w = 2;
  g.out_h = g.out_w = g.h;
  return g;
}

bool is_cudnn(const std::string& algorithm) {
  return algorithm.rfind("native", 0) != 0;
}

// The algorithms cuDNN may run in this engine: direct sums of products only (cudnn_conv2d.cu).
bool is_direct(const std::string& algorithm) {
  for (const char* name :
       {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "ALGO_0", "ALGO_1", "ALGO_3"})
    if (algorithm == name) return true;
  return false;
}

std::unique_ptr<mnist::Backend> fresh_backend(const std::string& engine) {
  mnist::BackendOptions options;
  options.engine = mnist::parse_engine(engine, "gpu tests");
  return mnist::make_cuda_backend(0, options);
}

}  // namespace

TEST_CASE("native and cublas engines report the hand-written convolution they run",
          "[gpu][conv2d]") {
  mnist::Conv2dGeom strided = seed_conv(64, true);
  strided.stride_h = strided.stride_w = 2;
  strided.out_h = strided.out_w = 7;
  for (const std::string engine : {"native", "cublas"}) {
    INFO("engine " << engine);
    // The seed's convolutions run the direct kernels; a stride-2 one the implicit GEMM.
    for (bool second : {false, true}) {
      const mnist::Conv2dAlgorithms a = gpu(engine).conv2d_algorithms(seed_conv(64, second));
      CHECK(a.forward == "direct");
      CHECK(a.backward_data == "direct");
      CHECK(a.backward_weights == "direct");
    }
    const mnist::Conv2dAlgorithms a = gpu(engine).conv2d_algorithms(strided);
    CHECK(a.forward == "native");
    CHECK(a.backward_data == "native");
    CHECK(a.backward_weights == "native");
  }
}

TEST_CASE("a batch sized after a smaller one still runs a cuDNN algorithm, in its workspace",
          "[gpu][conv2d][cudnn][workspace]") {
  if (!MNIST_HAVE_CUDNN) {
    WARN("NOT TESTED: this build has no cuDNN");
    return;
  }
  for (bool second : {false, true}) {
    INFO((second ? "seed conv2" : "seed conv1"));
    // A fresh backend: no plan or promise from other tests. n=1 is sized first (it may need no
    // workspace at all), then n=1000 (which the old planner capped at n=1's workspace).
    const std::unique_ptr<mnist::Backend> fresh = fresh_backend("cudnn");
    mnist::Backend& g = *fresh;
    const std::size_t small_ws = g.conv2d_workspace_floats(seed_conv(1, second));
    const std::size_t ws = g.conv2d_workspace_floats(seed_conv(1000, second));
    CHECK(ws >= small_ws);
    const mnist::Conv2dAlgorithms large = g.conv2d_algorithms(seed_conv(1000, second));
    INFO("n=1000 runs forward " << large.forward << ", backward-data " << large.backward_data
                                << ", backward-weights " << large.backward_weights
                                << " with workspaces " << small_ws << " then " << ws << " floats");
    CHECK(is_cudnn(large.forward));
    CHECK(is_cudnn(large.backward_data));
    CHECK(is_cudnn(large.backward_weights));
    for (int n : {1000, 1, 257}) {
      const mnist::Conv2dAlgorithms a = g.conv2d_algorithms(seed_conv(n, second));
      INFO("n " << n << ": forward " << a.forward << ", backward-data " << a.backward_data
                << ", backward-weights " << a.backward_weights);
      // Whatever cuDNN picks is a direct algorithm (no FFT or Winograd), or the native kernels.
      for (const std::string& name : {a.forward, a.backward_data, a.backward_weights})
        CHECK((is_direct(name) || !is_cudnn(name)));
    }

    // Every batch size runs in the final workspace and matches the CPU (the guard after the
    // workspace must stay untouched).
    constexpr std::size_t kGuard = 1 << 16;
    const float sentinel = -12345.5f;
    mnist::DeviceBuffer<float> ws_gpu(g, ws + kGuard);
    g.fill(ws_gpu.data() + ws, kGuard, sentinel);
    for (int n : {1, 1000}) {
      INFO("n " << n);
      const mnist::Conv2dGeom geo = seed_conv(n, second);
      const std::size_t x_size = static_cast<std::size_t>(n) * geo.c * geo.h * geo.w;
      const std::size_t y_size = static_cast<std::size_t>(n) * geo.k * geo.out_h * geo.out_w;
      const std::size_t w_size = static_cast<std::size_t>(geo.k) * geo.c * geo.kh * geo.kw;
      auto x = upload(g, random_floats(x_size, 700 + n, -1.0f, 1.0f));
      auto w = upload(g, random_floats(w_size, 701 + n, -1.0f, 1.0f));
      auto dy = upload(g, random_floats(y_size, 702 + n, -1.0f, 1.0f));
      mnist::DeviceBuffer<float> ws_cpu(
          cpu(), std::max<std::size_t>(1, cpu().conv2d_workspace_floats(geo)));
      const double patch = static_cast<double>(geo.c) * geo.kh * geo.kw;
      const double positions = static_cast<double>(n) * geo.out_h * geo.out_w;
      const auto atol = [](double terms) { return 1e-6 * std::max(1.0, terms) + 1e-6; };
      auto y = poisoned(g, y_size);
      cpu().conv2d_forward(geo, x.c(), w.c(), nullptr, y.c(), ws_cpu.data());
      g.conv2d_forward(geo, x.g(), w.g(), nullptr, y.g(), ws_gpu.data());
      expect_close(g, y, atol(patch), 1e-5, "conv2d_forward");
      auto dx = poisoned(g, x_size);
      cpu().conv2d_backward_data(geo, dy.c(), w.c(), dx.c(), ws_cpu.data());
      g.conv2d_backward_data(geo, dy.g(), w.g(), dx.g(), ws_gpu.data());
      expect_close(g, dx, atol(geo.k * geo.kh * geo.kw), 1e-5, "conv2d_backward_data");
      auto dw = poisoned(g, w_size);
      cpu().conv2d_backward_weights(geo, x.c(), dy.c(), dw.c(), nullptr, ws_cpu.data());
      g.conv2d_backward_weights(geo, x.g(), dy.g(), dw.g(), nullptr, ws_gpu.data());
      expect_close(g, dw, atol(positions), 1e-5, "conv2d_backward_weights");
    }
    std::vector<float> guard(kGuard);
    g.copy_to_host(guard.data(), ws_gpu.data() + ws, kGuard * sizeof(float));
    CHECK(std::count(guard.begin(), guard.end(), sentinel) == static_cast<long>(kGuard));
  }
}

TEST_CASE("the cudnn engine names its fallback for a convolution cuDNN cannot express",
          "[gpu][conv2d][cudnn]") {
  if (!MNIST_HAVE_CUDNN) {
    WARN("NOT TESTED: this build has no cuDNN");
    return;
  }
  // TF SAME with an even kernel: one more padding row at the bottom than at the top.
  mnist::Conv2dGeom g;
  g.n = 7;
  g.c = 2;
  g.h = g.w = 7;
  g.k = 3;
  g.kh = g.kw = 4;
  g.stride_h = g.stride_w = 2;
  g.pad_h = g.pad_w = 1;
  g.out_h = g.out_w = 4;
  const mnist::Conv2dAlgorithms a = gpu("cudnn").conv2d_algorithms(g);
  CHECK_THAT(a.forward, Catch::StartsWith("native (") && Catch::Contains("padding"));
  CHECK(a.backward_data == a.forward);
  CHECK(a.backward_weights == a.forward);
}
