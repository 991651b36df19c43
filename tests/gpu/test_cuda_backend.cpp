// The CUDA backend's own behaviour: device discovery, names, errors people read, memory round
// trips.
#include <catch2/catch.hpp>

#include <limits>
#include <string>

#include "backend/backend.hpp"
#include "backend/cuda_devices.hpp"
#include "core/error.hpp"
#include "gpu/gpu_support.hpp"

using namespace gpu_test;

TEST_CASE("list_gpus describes every visible GPU", "[gpu][devices]") {
  const auto gpus = mnist::list_gpus();
  REQUIRE(static_cast<int>(gpus.size()) == mnist::visible_gpu_count());
  REQUIRE(!gpus.empty());
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    CAPTURE(i, gpus[i].name, gpus[i].pci_bus_id, gpus[i].uuid);
    CHECK(gpus[i].ordinal == static_cast<int>(i));
    CHECK(!gpus[i].name.empty());
    CHECK(gpus[i].pci_bus_id.size() >= 12);  // "0000:19:00.0"
    CHECK(gpus[i].uuid.rfind("GPU-", 0) == 0);
    CHECK(gpus[i].uuid.size() == 40);
    CHECK(gpus[i].cc_major >= 7);
    CHECK(gpus[i].total_bytes > 0);
    CHECK(gpus[i].free_bytes <= gpus[i].total_bytes);
  }
  CHECK(mnist::cuda_versions().find("driver") != std::string::npos);
}

TEST_CASE("the CUDA backend names its device", "[gpu][backend]") {
  mnist::Backend& g = gpu();
  CHECK(g.kind() == mnist::DeviceKind::cuda);
  CHECK(g.name().rfind("gpu0 (", 0) == 0);
  CHECK(g.name().find(mnist::list_gpus().at(0).name) != std::string::npos);
}

TEST_CASE("a GPU ordinal that is not visible is refused with what was visible", "[gpu][backend]") {
  const int count = mnist::visible_gpu_count();
  for (int ordinal : {count, count + 5, -1}) {
    CAPTURE(ordinal);
    try {
      mnist::make_cuda_backend(ordinal, mnist::BackendOptions{});
      FAIL("make_cuda_backend accepted an invisible GPU");
    } catch (const mnist::RuntimeError& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find("GPU " + std::to_string(ordinal)) != std::string::npos);
      CHECK(what.find("visible") != std::string::npos);
      CHECK(what.find("CUDA_VISIBLE_DEVICES") != std::string::npos);
      CHECK(what.find("driver") != std::string::npos);
    }
  }
}

// An engine name is checked where it is spelled (tests/unit/test_spellings.cpp has the unknown
// one); the backend still refuses an engine of the other backend made in code.
TEST_CASE("a CPU engine is refused with the CUDA ones", "[gpu][backend]") {
  mnist::BackendOptions options;
  options.engine = mnist::Engine::blas;
  try {
    mnist::make_cuda_backend(0, options);
    FAIL("make_cuda_backend accepted engine 'blas'");
  } catch (const mnist::RuntimeError& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("'blas'") != std::string::npos);
    CHECK(what.find("native, cublas, cudnn, fused") != std::string::npos);
  }
}

TEST_CASE("out of memory says how much was asked and how much is free", "[gpu][backend]") {
  mnist::Backend& g = gpu();
  const std::size_t too_much = mnist::list_gpus().at(0).total_bytes * 2;
  try {
    g.allocate(too_much);
    FAIL("allocating twice the GPU's memory succeeded");
  } catch (const mnist::RuntimeError& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("out of memory") != std::string::npos);
    CHECK(what.find(std::to_string(too_much)) != std::string::npos);
    CHECK(what.find("free") != std::string::npos);
  }
  // The failure left the backend usable.
  mnist::DeviceBuffer<float> ok(g, 1000);
  g.fill(ok.data(), ok.size(), 2.5f);
  std::vector<float> host(ok.size());
  g.copy_to_host(host.data(), ok.data(), ok.bytes());
  CHECK(host.front() == 2.5f);
  CHECK(host.back() == 2.5f);
}

TEST_CASE("copies round-trip through device memory", "[gpu][backend]") {
  mnist::Backend& g = gpu();
  for (int n : kSizes) {
    CAPTURE(n);
    const std::vector<float> src = random_floats(n, 900 + n, -3.0f, 3.0f);
    mnist::DeviceBuffer<float> a(g, n), b(g, n);
    g.copy_to_device(a.data(), src.data(), a.bytes());
    g.copy_on_device(b.data(), a.data(), a.bytes());
    std::vector<float> back(n, std::numeric_limits<float>::quiet_NaN());
    g.copy_to_host(back.data(), b.data(), b.bytes());  // waits for the stream
    CHECK(back == src);
  }
  g.synchronize();
}
