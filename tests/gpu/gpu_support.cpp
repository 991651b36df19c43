#include "gpu/gpu_support.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>

#include "build_info.hpp"

namespace gpu_test {
namespace {

std::unique_ptr<mnist::Backend>& cpu_slot() {
  static std::unique_ptr<mnist::Backend> backend;
  return backend;
}
std::map<std::string, std::unique_ptr<mnist::Backend>>& gpu_slots() {
  static std::map<std::string, std::unique_ptr<mnist::Backend>> backends;
  return backends;
}

}  // namespace

mnist::Backend& cpu() {
  auto& slot = cpu_slot();
  if (!slot) slot = mnist::make_cpu_backend(mnist::BackendOptions{});
  return *slot;
}

mnist::Backend& gpu(const std::string& engine) {
  auto& slot = gpu_slots()[engine];
  if (!slot) {
    mnist::BackendOptions options;
    options.engine = mnist::parse_engine(engine, "gpu tests");
    slot = mnist::make_cuda_backend(0, options);
  }
  return *slot;
}

std::vector<std::string> engines() {
  std::vector<std::string> names;
  for (mnist::Engine e : mnist::cuda_engines()) names.push_back(mnist::to_string(e));
  return names;
}

void release_backends() {
  gpu_slots().clear();
  cpu_slot().reset();
}

std::vector<float> random_floats(std::size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<int32_t> random_ints(std::size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

Twin<float> poisoned(mnist::Backend& gpu_backend, std::size_t n) {
  Twin<float> t{mnist::DeviceBuffer<float>(cpu(), n), mnist::DeviceBuffer<float>(gpu_backend, n)};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (n) {
    cpu().fill(t.cpu.data(), n, nan);
    gpu_backend.fill(t.gpu.data(), n, nan);
  }
  return t;
}

Twin<int32_t> poisoned_ints(mnist::Backend& gpu_backend, std::size_t n) {
  return upload(gpu_backend, std::vector<int32_t>(n, -123456789));
}

void expect_close(mnist::Backend& gpu_backend, const Twin<float>& out, double atol, double rtol,
                  const std::string& what) {
  const std::vector<float> want = download(cpu(), out.cpu);
  const std::vector<float> got = download(gpu_backend, out.gpu);
  struct Bad {
    std::size_t index;
    double excess;
  };
  std::vector<Bad> bad;
  std::size_t cpu_nan = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double c = want[i], g = got[i];
    if (std::isnan(c)) ++cpu_nan;
    const double limit = atol + rtol * std::fabs(c);
    const double diff = std::fabs(g - c);
    if (!(diff <= limit)) bad.push_back({i, std::isnan(diff) ? 1e300 : diff - limit});
  }
  std::ostringstream report;
  report << what << " on " << gpu_backend.name() << ": " << bad.size() << " of " << want.size()
         << " elements break |gpu-cpu| <= " << atol << " + " << rtol << "*|cpu|";
  if (cpu_nan)
    report << " (" << cpu_nan << " NaN in the CPU result: the oracle left them unwritten)";
  std::sort(bad.begin(), bad.end(), [](const Bad& a, const Bad& b) { return a.excess > b.excess; });
  for (std::size_t i = 0; i < std::min<std::size_t>(bad.size(), 5); ++i) {
    const std::size_t k = bad[i].index;
    report << "\n  [" << k << "] gpu " << got[k] << " cpu " << want[k];
  }
  INFO(report.str());
  CHECK(bad.empty());
}

void expect_equal(mnist::Backend& gpu_backend, const Twin<int32_t>& out, const std::string& what) {
  const std::vector<int32_t> want = download(cpu(), out.cpu);
  const std::vector<int32_t> got = download(gpu_backend, out.gpu);
  std::size_t mismatches = 0, first = want.size();
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (want[i] != got[i]) {
      if (!mismatches) first = i;
      ++mismatches;
    }
  }
  std::ostringstream report;
  report << what << " on " << gpu_backend.name() << ": " << mismatches << " of " << want.size()
         << " differ";
  if (mismatches)
    report << "; first at [" << first << "]: gpu " << got[first] << " cpu " << want[first];
  INFO(report.str());
  CHECK(mismatches == 0);
}

}  // namespace gpu_test
